"""python -m paddleray.services.trainer (console script: paddleray-trainer)."""

from __future__ import annotations

from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.trainer.servicer import TrainerServicer
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer
from paddleray.trainer.v1 import trainer_service_pb2, trainer_service_pb2_grpc


def registrations(trainer: Trainer) -> list[ServiceRegistration]:
    return [
        ServiceRegistration(
            trainer_service_pb2.DESCRIPTOR.services_by_name["TrainerService"].full_name,
            TrainerServicer(trainer),
            trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server,
        )
    ]


async def serve(settings: TrainerSettings) -> None:
    trainer = Trainer(settings)
    # Connected to Ray before the port file appears, so a client that sees it can start runs.
    await run_service("trainer", settings, registrations(trainer), on_started=trainer.start, on_shutdown=trainer.shutdown)


def main() -> None:
    settings = TrainerSettings.from_env_and_flags("paddleray-trainer")
    run(lambda: serve(settings))


if __name__ == "__main__":
    main()
