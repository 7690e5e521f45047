"""python -m paddleray.services.scheduler (console script: paddleray-scheduler)."""

from __future__ import annotations

from paddleray.scheduler.v1 import job_service_pb2, job_service_pb2_grpc
from paddleray.services.common.entry import run
from paddleray.services.common.server import ServiceRegistration, run_service
from paddleray.services.scheduler import experiment_servicer, package_servicer
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.servicer import JobServicer
from paddleray.services.scheduler.settings import SchedulerSettings


def registrations(app: SchedulerApp) -> list[ServiceRegistration]:
    return [
        ServiceRegistration(
            job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            JobServicer(app.manager, app.logs),
            job_service_pb2_grpc.add_JobServiceServicer_to_server,
        ),
        experiment_servicer.registration(app.experiments),
        package_servicer.registration(app.packages),
    ]


async def serve(settings: SchedulerSettings) -> None:
    app = SchedulerApp(settings)
    await run_service("scheduler", settings, registrations(app), on_started=app.start, on_shutdown=app.stop,
                      readiness=app.store_health.ready, readiness_interval_s=settings.store_check_interval_s)


def main() -> None:
    settings = SchedulerSettings.for_main("paddleray-scheduler")
    run(lambda: serve(settings))


if __name__ == "__main__":
    main()
