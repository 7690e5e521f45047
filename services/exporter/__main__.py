"""python -m paddleray.services.exporter (console script: paddleray-exporter)."""

from __future__ import annotations

from paddleray.exporter.v1 import exporter_service_pb2, exporter_service_pb2_grpc
from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.exporter.settings import ExporterSettings


def registrations(settings: ExporterSettings) -> list[ServiceRegistration]:
    # Export and serving behaviour come with the exporter issue; until then every RPC answers
    # UNIMPLEMENTED through the generated base servicer.
    return [
        ServiceRegistration(
            exporter_service_pb2.DESCRIPTOR.services_by_name["ExporterService"].full_name,
            exporter_service_pb2_grpc.ExporterServiceServicer(),
            exporter_service_pb2_grpc.add_ExporterServiceServicer_to_server,
        )
    ]


def main() -> None:
    settings = ExporterSettings.from_env_and_flags("paddleray-exporter")
    run(lambda: run_service("exporter", settings, registrations(settings)))


if __name__ == "__main__":
    main()
