"""gRPC stubs of a running stack, found through its state file or given addresses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
import typer

from paddleray.exporter.v1 import exporter_service_pb2_grpc
from paddleray.scheduler.v1 import experiment_service_pb2_grpc, job_service_pb2_grpc
from paddleray.services.localstack import stack
from paddleray.trainer.v1 import trainer_service_pb2_grpc


@dataclass
class Clients:
    jobs: job_service_pb2_grpc.JobServiceStub
    experiments: experiment_service_pb2_grpc.ExperimentServiceStub
    trainer: trainer_service_pb2_grpc.TrainerServiceStub
    exporter: exporter_service_pb2_grpc.ExporterServiceStub
    # Sent with every call: the bearer token when the services require one.
    metadata: tuple[tuple[str, str], ...]


def connect(state_dir: Path, token: str = "") -> Clients:
    state = stack.StackState.load(state_dir)
    if state is None:
        raise typer.BadParameter(f"no stack state in {state_dir}; start one with `paddleray up`")
    scheduler = grpc.insecure_channel(state.address("scheduler"))
    return Clients(
        jobs=job_service_pb2_grpc.JobServiceStub(scheduler),
        experiments=experiment_service_pb2_grpc.ExperimentServiceStub(scheduler),
        trainer=trainer_service_pb2_grpc.TrainerServiceStub(grpc.insecure_channel(state.address("trainer"))),
        exporter=exporter_service_pb2_grpc.ExporterServiceStub(grpc.insecure_channel(state.address("exporter"))),
        metadata=(("authorization", f"Bearer {token}"),) if token else (),
    )
