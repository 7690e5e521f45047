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
    # Health says NOT_SERVING, and Ray-using RPCs answer UNAVAILABLE, until trainer.start has
    # loaded earlier runs and connected to Ray (the port file appears only then), and again
    # whenever the Ray cluster is lost, until the trainer has reconnected.
    await run_service(
        "trainer", settings, registrations(trainer),
        on_started=trainer.start, on_shutdown=trainer.shutdown,
        readiness=trainer.ready, readiness_interval_s=settings.ray_probe_interval_s,
    )


def main() -> None:
    settings = TrainerSettings.for_main("paddleray-trainer")
    run(lambda: serve(settings))


if __name__ == "__main__":
    main()
