"""In-test stand-ins for the ServingController and the RayConnection, for reconciler tests over a
real Redis (the real ones need Ray Serve: tests/integration/exporter/test_deploy.py drives them)."""

from __future__ import annotations

import asyncio

from paddleray.services.common import errors
from paddleray.services.exporter.serving.control.serve_status import ServedModelStatus, VersionState, VersionStatus
from paddleray.services.exporter.serving.spec import validate_models


class Controller:
    """Applies instantly; status() reports what was applied, with the live state a test sets."""

    def __init__(self) -> None:
        self.starts = 0
        self.known: list[str] = []  # what start() was told the registry serves
        self.applied: list[list] = []
        self.release = asyncio.Event()
        self.release.set()
        self.live: dict[tuple[str, str], tuple[VersionState, str]] = {}  # (name, version) -> (state, message)
        # (name, version) -> the probe's message: Serve runs it, the endpoints do not answer for it.
        self.unanswered: dict[tuple[str, str], str] = {}

    async def start(self, known=()) -> None:
        self.starts += 1
        self.known = list(known)

    async def apply(self, models) -> None:
        validate_models(models)  # the serving layer's own rules
        self.applied.append(list(models))  # status() shows it at once, as Serve's does
        await self.release.wait()

    async def status(self):
        found = {}
        for model in self.applied[-1] if self.applied else []:
            versions = {}
            for v in model.versions:
                state, message = self.live.get((model.serving_name, v.version), (VersionState.READY, ""))
                running = 1 if state is VersionState.READY else 0
                versions[v.version] = VersionStatus(v.version, state, running, 1, running == 1, v.weight, message,
                                                    replicas_per_node=[("node-a", "10.0.0.1", running)] if running else [])
                if state is VersionState.READY and (model.serving_name, v.version) in self.unanswered:
                    # What the real status() makes of a READY version its probe got no answer for.
                    status = versions[v.version]
                    status.state, status.answered = VersionState.UNHEALTHY, False
                    status.message = self.unanswered[(model.serving_name, v.version)]
            found[model.serving_name] = ServedModelStatus(model.serving_name, versions)
        return found


class Cluster:
    """The parts of RayConnection the reconciler reads (the real one needs a Ray head it can
    stop: tests/e2e/test_exporter_ray_connection.py)."""

    def __init__(self) -> None:
        self.generation = 1
        self.connected = True

    def require(self) -> None:
        if not self.connected:
            raise errors.Unavailable("the Ray cluster cannot be reached")
