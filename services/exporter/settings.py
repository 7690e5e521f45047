"""Runs in: the exporter process.

Exporter configuration (env prefix PADDLERAY_EXPORTER_)."""

from __future__ import annotations

import os
import socket
import uuid

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from paddleray.services.common.peers import PeerSettings
from paddleray.services.common.redis_client import RedisSettings
from paddleray.services.common.settings import ServiceSettings, StrList


def _replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class SchedulerPeer(PeerSettings):
    address: str = Field(
        "127.0.0.1:50051", description="host:port of the scheduler, read for exports from a job; empty disables them."
    )
    auth_token: SecretStr = Field(
        SecretStr(""), description="The exporter's own credential at the scheduler: a bearer token of an admin "
        "(it reads the jobs of every tenant), if the scheduler requires tokens."
    )


class ExporterSettings(ServiceSettings, RedisSettings):
    model_config = SettingsConfigDict(env_prefix="PADDLERAY_EXPORTER_", extra="ignore")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis holding the model registry and deployments; rediss://... for "
        "TLS. Keep the password out of it: use redis_password."
    )
    ray_address: str = Field("auto", description="Ray cluster that runs exports and Ray Serve.")
    # The connection to it: paddleray.services.common.ray_connection, as the trainer's.
    ray_probe_interval_s: float = Field(1.0, gt=0, description="How often the exporter checks that its Ray cluster answers.")
    # Ray itself ends a driver whose GCS has been gone for 60 s: let go of the cluster well before.
    ray_lost_after_s: float = Field(
        10.0, gt=0, le=45,
        description="A cluster that does not answer for this long is lost: its exports fail and the exporter reconnects.",
    )
    ray_retry_interval_s: float = Field(2.0, gt=0, description="Wait between attempts to connect to Ray.")
    ray_lost_exit: bool = Field(
        True,
        description="On a lost Ray cluster, exit with code 75 once its exports are failed and its deployments marked, "
                    "to reconnect in a fresh process started by the supervisor (the local stack's, Kubernetes', "
                    "compose's); false reconnects in the same process.",
    )

    # Serving (services/exporter/serving): Ray Serve's HAProxy binds serving_http_host on both
    # ports (gRPC and REST) and sends each request straight to a replica of the model.
    serving_grpc_port: int = Field(9000, description="Port of the v2 inference gRPC endpoint (Ray Serve's HAProxy).")
    serving_http_host: str = Field("127.0.0.1", description="Host the v2 inference endpoints (gRPC and REST) bind.")
    serving_http_port: int = Field(8000, description="Port of the v2 inference REST endpoint (Ray Serve's HAProxy).")
    serving_probe_host: str = Field(
        "", description="Host this exporter reaches the endpoints on, to check a deployment answers before HEALTHY; "
                        "defaults to serving_http_host (127.0.0.1 for 0.0.0.0).",
    )

    # -- export, registry and deployments ----------------------------------------------------
    scheduler: SchedulerPeer = Field(default_factory=SchedulerPeer, description="The scheduler service "
                                     "(PADDLERAY_EXPORTER_SCHEDULER_ADDRESS, _SCHEDULER_AUTH_TOKEN, _SCHEDULER_TLS_CA_FILE, ...).")
    builder_allowlist: StrList = Field(
        default_factory=lambda: ["paddleray.services.trainer.examples"],
        description="Module prefixes whose model builders exports may call (as the trainer's entrypoint_allowlist).",
    )
    export_num_cpus: float = Field(1.0, gt=0, description="CPUs the export task reserves on the cluster.")
    export_timeout_s: float = Field(900.0, gt=0, description="An export running longer than this fails.")
    replica_id: str = Field(default_factory=_replica_id, description="Owner name of this replica's exports.")
    owner_lease_s: float = Field(
        10.0, gt=0, description="Exports of a replica that stopped renewing its lease this long ago are failed."
    )
    sweep_interval_s: float = Field(2.0, gt=0, description="How often leases are renewed and lost exports swept.")
    reconcile_interval_s: float = Field(
        5.0, gt=0, description="Longest wait between reconcile passes (a change triggers one at once)."
    )
    health_interval_s: float = Field(2.0, gt=0, description="How often Redis and Ray reachability is checked.")
    inference_endpoint: str = Field(
        "", description="Address of the v2 inference gRPC endpoint shown on deployments; defaults to this host's serving_grpc_port.",
    )
    inference_http_endpoint: str = Field(
        "", description="Base URL (http://host:port) of the v2 REST endpoint shown on deployments; defaults to this host's serving_http_port.",
    )
