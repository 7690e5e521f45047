"""Runs in: the exporter process.

python -m paddleray.services.exporter (console script: paddleray-exporter)."""

from __future__ import annotations

from paddleray.exporter.v1 import exporter_service_pb2, exporter_service_pb2_grpc
from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.exporter.app import ExporterApp
from paddleray.services.exporter.servicer import ExporterServicer
from paddleray.services.exporter.settings import ExporterSettings


def registrations(app: ExporterApp) -> list[ServiceRegistration]:
    return [
        ServiceRegistration(
            exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"].full_name,
            ExporterServicer(app.exports, app.models, app.deployments),
            exporter_service_pb2_grpc.add_ExporterServiceServicer_to_server,
        )
    ]


async def serve(settings: ExporterSettings) -> None:
    app = ExporterApp(settings)
    await run_service("exporter", settings, registrations(app), on_started=app.start, on_shutdown=app.stop,
                      readiness=app.ready, readiness_interval_s=settings.health_interval_s)


def main() -> None:
    settings = ExporterSettings.for_main("paddleray-exporter")
    run(lambda: serve(settings))


if __name__ == "__main__":
    main()
