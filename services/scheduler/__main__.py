"""python -m paddleray.services.scheduler (console script: paddleray-scheduler)."""

from __future__ import annotations

from paddleray.scheduler.v1 import (
    experiment_service_pb2,
    experiment_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
)
from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.scheduler.settings import SchedulerSettings


def registrations(settings: SchedulerSettings) -> list[ServiceRegistration]:
    return [
        ServiceRegistration(
            job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            job_service_pb2_grpc.JobServiceServicer(),
            job_service_pb2_grpc.add_JobServiceServicer_to_server,
        ),
        ServiceRegistration(
            experiment_service_pb2.DESCRIPTOR.services_by_name["ExperimentService"].full_name,
            experiment_service_pb2_grpc.ExperimentServiceServicer(),
            experiment_service_pb2_grpc.add_ExperimentServiceServicer_to_server,
        ),
    ]


def main() -> None:
    settings = SchedulerSettings()
    run(lambda: run_service("scheduler", settings, registrations(settings)))


if __name__ == "__main__":
    main()
