"""The demo's serving half: export the retrained job with validation figures, deploy the version
on Ray Serve, and query it through the Open Inference Protocol v2 on held-out digits."""

from __future__ import annotations

import time
from typing import Any

import grpc
import numpy as np
from rich.console import Console

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.cli.demo_report import percentile
from paddleray.services.cli.demo_training import DemoFailed
from paddleray.services.cli.models_commands import print_validation
from paddleray.services.client import Client
from paddleray.services.client.errors import ClientError, ServiceError
from paddleray.services.client.exporter import Exporter
from paddleray.services.client.inference import Inference
from paddleray.services.common import names
from paddleray.services.trainer.examples import digits_data
from paddleray.services.trainer.examples.config import TrainConfig

V = model_pb2.ModelVersionState
D = deployment_pb2.DeploymentState


def _state(enum, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix)


def export(client: Client, console: Console, job: str, model_id: str, timeout_s: float = 600) -> model_pb2.ModelVersion:
    """ExportModel from the job (its best checkpoint by its policy), then GetModelVersion until it settles."""
    exporter = Exporter(client)
    version = exporter.export_model(model_id, job=job)
    shown: list[str] = []

    def progress(current: model_pb2.ModelVersion) -> None:
        state = _state(V, current.state, "MODEL_VERSION_STATE_")
        if not shown or shown[-1] != state:
            console.print(f"{current.name} {state}" + (f" ({current.state_reason})" if current.state_reason else ""),
                          markup=False, highlight=False, soft_wrap=True)
            shown.append(state)

    done = exporter.wait_model_version(version.name, timeout=timeout_s, on_update=progress)
    if done.state != V.MODEL_VERSION_STATE_READY:
        raise DemoFailed(f"{done.name} ended {_state(V, done.state, 'MODEL_VERSION_STATE_')}: {done.state_reason}")
    source = done.source_checkpoint
    console.print(f"from {done.source_job} checkpoint epoch {source.epoch} "
                  f"(accuracy {source.metrics.get('accuracy', float('nan')):.4f}): {source.uri}",
                  markup=False, highlight=False, soft_wrap=True)
    print_validation(done)
    return done


def deploy(client: Client, console: Console, version: model_pb2.ModelVersion, deployment_id: str,
           timeout_s: float = 300) -> deployment_pb2.Deployment:
    """CreateDeployment serving the version, then GetDeployment until it is HEALTHY."""
    exporter = Exporter(client)
    wanted = deployment_pb2.Deployment(
        serving_name=deployment_id, num_replicas=1,
        traffic=[deployment_pb2.TrafficTarget(model_version=version.name, percent=100)],
    )
    # Half a core: the replica must not hold a whole CPU of a 2-core machine.
    wanted.resources_per_replica.num_cpus = 0.5
    created = exporter.create_deployment(deployment_id, wanted)
    shown: list[str] = []

    def progress(current: deployment_pb2.Deployment) -> None:
        replicas = " ".join(f"v{s.model_version.rsplit('/', 1)[-1]}:{s.running_replicas}/{s.target_replicas}"
                            for s in current.version_statuses)
        line = f"{current.name} {_state(D, current.state, 'DEPLOYMENT_STATE_')}" + (f" replicas {replicas}" if replicas else "")
        if not shown or shown[-1] != line:
            console.print(line + (f" ({current.state_reason})" if current.state_reason else ""),
                          markup=False, highlight=False, soft_wrap=True)
            shown.append(line)

    done = exporter.wait_deployment(created.name, timeout=timeout_s, on_update=progress)
    if done.state != D.DEPLOYMENT_STATE_HEALTHY:
        raise DemoFailed(f"{done.name} ended {_state(D, done.state, 'DEPLOYMENT_STATE_')}: {done.state_reason}")
    console.print(f"serving model_name {done.serving_name!r} at {done.endpoint} (inference.GRPCInferenceService, "
                  f"metadata application: {done.serving_name}) and {done.http_endpoint} (v2 REST)",
                  markup=False, highlight=False)
    return done


def held_out(config: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The validation rows of the split the job trained with: rows the model never trained on."""
    cfg = TrainConfig.from_dict(config)
    return digits_data.load_split(cfg.validation_fraction, cfg.seed)["validation"]


def query(client: Client, console: Console, deployment: deployment_pb2.Deployment, version: model_pb2.ModelVersion,
          features: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """One ModelInfer per held-out row (latency as a client sees it), then all rows in one call."""
    address = deployment.endpoint
    inference = Inference(client, address=address)
    if not inference.server_ready():
        raise DemoFailed(f"the v2 endpoint {address} is not ready")
    model = deployment.serving_name
    input_name = version.inputs[0].name if version.inputs else "x"
    features = features.astype(np.float32)

    def logits(rows: np.ndarray) -> np.ndarray:
        outputs = inference.infer(model, {input_name: rows})
        return next(iter(outputs.values()))

    started = time.perf_counter()
    cold = logits(features[:1])
    cold_ms = (time.perf_counter() - started) * 1e3
    single: list[int] = []
    latencies: list[float] = []
    for row in range(len(labels)):
        started = time.perf_counter()
        single.append(int(np.argmax(logits(features[row:row + 1]), axis=1)[0]))
        latencies.append((time.perf_counter() - started) * 1e3)
    started = time.perf_counter()
    batch = np.argmax(logits(features), axis=1)
    batch_ms = (time.perf_counter() - started) * 1e3
    predictions = np.asarray(single)
    accuracy = float(np.mean(predictions == labels))
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    result: dict[str, Any] = {
        "model_name": model, "endpoint": address, "rows": int(len(labels)),
        "accuracy": accuracy, "correct": int(np.sum(predictions == labels)),
        "latency_ms": {"p50": p50, "p99": p99,
                       "mean": float(np.mean(latencies)), "cold_first_request": cold_ms},
        "batch_call": {"rows": int(len(labels)), "ms": batch_ms,
                       "agrees_with_single_rows": bool(np.array_equal(batch, predictions))},
        "output_shape": list(cold.shape),
    }
    console.print(
        f"[bold]accuracy {accuracy:.4f}[/bold] ({result['correct']}/{len(labels)} held-out digits) through ModelInfer; "
        f"latency per request p50 {p50:.2f} ms, p99 {p99:.2f} ms "
        f"(first request {cold_ms:.1f} ms); all {len(labels)} rows in one call: {batch_ms:.1f} ms", highlight=False,
    )
    return result


def undeploy(client: Client, console: Console, name: str) -> None:
    Exporter(client).delete_deployment(name)
    console.print(f"{name} deleted (use --keep to leave it serving)", markup=False)


def undeploy_if_created(client: Client, console: Console, deployment_id: str) -> None:
    """Deletes the deployment the demo was creating, if it exists; never raises over the
    error the demo is already reporting."""
    name = names.DEPLOYMENT.format(deployment=deployment_id)
    try:
        Exporter(client).delete_deployment(name)
    except ServiceError as error:
        if error.code != grpc.StatusCode.NOT_FOUND:
            console.print(f"could not delete {name}: {error}", markup=False)
        return
    except ClientError as error:
        console.print(f"could not delete {name}: {error}", markup=False)
        return
    console.print(f"{name} deleted (use --keep to leave it serving)", markup=False)
