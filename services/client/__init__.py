"""paddleray's Python SDK (`paddleray.services.client`): connection settings, a Client over the
generated stubs with retries and resuming streams, and job / experiment spec files."""

from paddleray.services.client.client import (
    TERMINAL_EXPERIMENT_STATES,
    TERMINAL_JOB_STATES,
    Client,
    experiment_name,
    job_name,
)
from paddleray.services.client.config import ConnectionConfig, TlsConfig, resolve
from paddleray.services.client.deployments import ServingOptions, new_deployment
from paddleray.services.client.errors import (
    ClientError,
    ConfigError,
    NotConfigured,
    ServiceError,
    SpecError,
    Unreachable,
    WaitTimeout,
)
from paddleray.services.client.exporter import Exporter
from paddleray.services.client.inference import Inference, Prediction
from paddleray.services.client.specs import load_experiment, load_job
from paddleray.services.client.streams import Reconnect

__all__ = [
    "TERMINAL_EXPERIMENT_STATES", "TERMINAL_JOB_STATES", "Client", "ClientError", "ConfigError", "ConnectionConfig",
    "Exporter", "Inference", "NotConfigured", "Prediction", "Reconnect", "ServiceError", "ServingOptions", "SpecError",
    "TlsConfig", "Unreachable", "WaitTimeout", "experiment_name", "job_name", "load_experiment", "load_job",
    "new_deployment", "resolve",
]
