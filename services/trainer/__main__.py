"""python -m paddleray.services.trainer (console script: paddleray-trainer)."""

from __future__ import annotations

from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc


def registrations(settings: TrainerSettings) -> list[ServiceRegistration]:
    return [
        ServiceRegistration(
            trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name,
            trainer_service_pb2_grpc.TrainerServiceServicer(),
            trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server,
        )
    ]


def main() -> None:
    settings = TrainerSettings()
    run(lambda: run_service("trainer", settings, registrations(settings)))


if __name__ == "__main__":
    main()
