"""Reconciler: makes Ray Serve serve every recorded deployment, and records what it observes.

The desired state is the deployments in Redis; one pass turns all of them into the serving
layer's ServedModel list and hands it to ServingController.apply (declarative: the whole
state, every time it changed), then reads ServingController.status() and writes each
deployment's observed state back (HEALTHY, UNHEALTHY with a reason, replica counts), and
removes DELETING deployments once Serve no longer serves their name. A pass runs at start-up,
after every change (wake), every interval, and again from scratch after every new connection
to the Ray cluster (a head restart: Serve and its apps are gone) -- no manual step.

A Ray head restart, step by step (the connection is services/common/ray_connection.py):
the connection sees the cluster gone and calls the app's on_lost, which calls cluster_lost()
here: the pass in flight is cancelled (it would wait on a dead GCS), every deployment is
recorded UNHEALTHY with the reason, and no pass calls Ray while the cluster is away (they fail
UNAVAILABLE, GetDeployment shows the recorded state). Once connected to the new cluster
(`generation` grew), the next pass starts Serve again (ServingController.start) and applies
every recorded deployment; each goes UPDATING, then HEALTHY when its apps run again.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors
from paddleray.services.common.ray_connection import RayConnection, in_daemon_thread
from paddleray.services.exporter import convert, deployment_spec
from paddleray.services.exporter.deployment_store import DeploymentRecord, DeploymentStore
from paddleray.services.exporter.direct_ports import DirectPorts
from paddleray.services.exporter.exports import artifact_dir
from paddleray.services.exporter.serving import spec as serving
from paddleray.services.exporter.serving.ownership import ServeOwnership
from paddleray.services.exporter.store import RegistryStore

log = logging.getLogger(__name__)
D = deployment_pb2.DeploymentState
_BACKEND_NAMES: dict[int, str] = {model_pb2.BACKEND_PADDLE_INFERENCE: "paddle", model_pb2.BACKEND_ONNX_RUNTIME: "onnx"}
_DEFAULT_BATCH_WAIT_S = 0.005
# Serve reports replicas it cannot place in a message, while the app stays DEPLOYING.
_PLACEMENT_HINTS = ("to be scheduled", "resources required", "insufficient resources", "infeasible")
_STATUS_TIMEOUT_S = 10.0
_ACTIVE = (D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING, D.DEPLOYMENT_STATE_HEALTHY)


class Reconciler:
    def __init__(self, deployments: DeploymentStore, registry: RegistryStore, controller, ray: RayConnection,
                 storage_root: Path, interval_s: float = 5.0, ownership: ServeOwnership | None = None,
                 direct_ports: DirectPorts | None = None) -> None:
        """ownership: checked before Serve is touched (another installation's Serve is left alone).
        direct_ports: gives each deployment the port of its own v2 endpoint (None: none have one)."""
        self.direct_ports = direct_ports
        self.deployments = deployments
        self.ownership = ownership
        self._ownership_unchecked = False
        self.registry = registry
        self.controller = controller
        self.ray = ray
        self.storage_root = Path(storage_root)
        self.interval_s = interval_s
        self._wake = asyncio.Event()
        self._generation = 0  # of the Ray connection the served state was applied on
        self._pass: asyncio.Task | None = None
        self._started = False
        self._applied: str | None = None
        self._apply_error = ""
        self._applied_specs: dict[str, int] = {}
        # Backend chosen for each (serving name, version) in the last pass, shown in status.
        self._backends: dict[tuple[str, str], int] = {}
        self.passes = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        skipping = False
        while True:
            self._wake.clear()
            # A task of its own: cluster_lost() cancels a pass stuck on a GCS that is gone.
            self._pass = asyncio.create_task(self.reconcile())
            try:
                await asyncio.wait({self._pass})
            finally:
                self._pass.cancel()  # this loop cancelled: the pass with it (no-op when done)
            failure = None if self._pass.cancelled() else self._pass.exception()
            away = failure if isinstance(failure, errors.Unavailable) and not self.ray.connected else None
            if away is not None:
                if not skipping:  # once per outage, not every interval
                    log.info("reconcile passes skipped: %s", away.message)
            elif failure is not None:  # Redis or Ray away for now: the next pass retries
                log.warning("reconcile pass failed", exc_info=failure)
            skipping = away is not None
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            except TimeoutError:
                pass

    async def reconcile(self) -> None:
        await self._follow_cluster()
        records = await self.deployments.all()
        if not records and not self._started:
            return  # nothing to serve: Serve (and the ports it opens) starts with the first deployment
        if self.ownership is not None and not await self._own_serve(records):
            return
        if not self._started:
            await self.controller.start()
            self._started = True
        active = [r for r in records if r.deployment.state != D.DEPLOYMENT_STATE_DELETING]
        ports = await self.direct_ports.assign([r.deployment_id for r in active]) if self.direct_ports else {}
        served, problems = await self._desired(active, ports)
        fingerprint = repr(served)
        if fingerprint != self._applied:
            try:
                await self.controller.apply(served)
                self._applied, self._apply_error = fingerprint, ""
            except errors.DomainError as exc:
                # Applied as a whole: nothing changed, and every deployment says why.
                self._applied, self._apply_error = fingerprint, exc.message
        # Serve's status shows a new routing table as soon as it is deployed, before the ingress
        # routes by it: a deployment is HEALTHY only once an apply of its current spec returned.
        self._applied_specs = {r.deployment_id: r.deployment.update_time.ToNanoseconds() for r in active}
        status = await self.controller.status()
        for record in records:
            await self._record_observation(record, status, problems.get(record.deployment_id, ""))
        self.passes += 1

    async def _own_serve(self, records: list[DeploymentRecord]) -> bool:
        """Whether this installation manages Serve on the cluster; if not, every deployment says why."""
        assert self.ownership is not None
        if not self.ownership.installation:
            self.ownership.installation = await self.deployments.installation_id()
        try:
            await in_daemon_thread(self.ownership.claim)
        except errors.FailedPrecondition as exc:
            if self._apply_error != exc.message:
                log.warning("%s", exc.message)
            self._started, self._applied, self._apply_error = False, None, exc.message
            for record in records:
                if record.deployment.state != D.DEPLOYMENT_STATE_DELETING:
                    await self._record_observation(record, {}, exc.message)
            return False
        except Exception as exc:  # noqa: BLE001 - no GCS key-value store to ask (Ray Client): go on
            if not self._ownership_unchecked:
                log.warning("cannot check which installation manages Ray Serve (%r); serving without the check", exc)
                self._ownership_unchecked = True
        return True

    async def cluster_lost(self, reason: str) -> None:
        """The Ray cluster went (the connection's on_lost; no Ray call here): cancels the pass in
        flight and records every active deployment UNHEALTHY until it is deployed again."""
        if self._pass is not None:
            self._pass.cancel()
            await asyncio.wait({self._pass})
        self._started, self._applied, self._applied_specs, self._apply_error = False, None, {}, ""
        for record in await self.deployments.all():
            d = record.deployment
            if d.state not in _ACTIVE:
                continue
            observed = deployment_pb2.Deployment()
            observed.CopyFrom(d)
            observed.state = D.DEPLOYMENT_STATE_UNHEALTHY
            observed.state_reason = f"{reason}; deployed again once the exporter is connected to the cluster again"
            for status in observed.version_statuses:
                status.state, status.running_replicas = D.DEPLOYMENT_STATE_UNHEALTHY, 0
            await self.deployments.write_status(record, observed)

    async def live(self, deployment: deployment_pb2.Deployment) -> deployment_pb2.Deployment:
        """The deployment with Serve's state now (GetDeployment); the stored one while the Ray
        cluster is away or Serve does not answer in time."""
        if not self.ray.connected:
            return deployment
        try:
            status = await asyncio.wait_for(self.controller.status(), _STATUS_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - Ray away: show the last observation
            return deployment
        return self.observe(deployment, status)

    def observe(self, deployment: deployment_pb2.Deployment, status: dict, problem: str = "") -> deployment_pb2.Deployment:
        observed = deployment_pb2.Deployment()
        observed.CopyFrom(deployment)
        observed.ClearField("version_statuses")
        model = status.get(deployment.serving_name)
        states = []
        for target in deployment.traffic:
            number = target.model_version.rsplit("/", 1)[1]
            live = model.versions.get(number) if model is not None else None
            entry = observed.version_statuses.add(
                model_version=target.model_version,
                backend=self._backends.get((deployment.serving_name, number), deployment.backend),
            )
            if live is None:
                entry.state = D.DEPLOYMENT_STATE_DEPLOYING
            else:
                entry.running_replicas, entry.target_replicas = live.running_replicas, live.target_replicas
                entry.message = live.message
                entry.state = _version_state(live, target.percent)
            states.append(entry)
        if deployment.state == D.DEPLOYMENT_STATE_DELETING:
            return observed
        reason = problem or self._apply_error
        unhealthy = [s for s in states if s.state == D.DEPLOYMENT_STATE_UNHEALTHY]
        if reason:
            observed.state, observed.state_reason = D.DEPLOYMENT_STATE_UNHEALTHY, reason
        elif unhealthy:
            observed.state = D.DEPLOYMENT_STATE_UNHEALTHY
            observed.state_reason = f"{unhealthy[0].model_version}: {unhealthy[0].message or 'replicas failing'}"
        elif all(s.state == D.DEPLOYMENT_STATE_HEALTHY for s in states) and self._applied_specs.get(
                deployment.name.removeprefix("deployments/")) == deployment.update_time.ToNanoseconds():
            observed.state, observed.state_reason = D.DEPLOYMENT_STATE_HEALTHY, ""
        elif deployment.state not in (D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING):
            observed.state, observed.state_reason = D.DEPLOYMENT_STATE_UPDATING, "replicas are (re)starting"
        return observed

    async def _follow_cluster(self) -> None:
        # UNAVAILABLE while the cluster is away: nothing is asked of Ray then.
        self.ray.require()
        if self.ray.generation != self._generation:
            if self._generation:
                log.warning("connected to the Ray cluster again: starting Serve and deploying every deployment again")
            self._generation, self._started, self._applied = self.ray.generation, False, None

    async def _desired(self, records: list[DeploymentRecord], ports: dict[str, int]) -> tuple[list, dict[str, str]]:
        served, problems = [], {}
        backends: dict[tuple[str, str], int] = {}
        for record in records:
            d = record.deployment
            versions = []
            try:
                for (model_id, number), target in zip(deployment_spec.targets(d), d.traffic, strict=True):
                    backend = await self._backend(d, model_id, number)
                    backends[d.serving_name, str(number)] = backend
                    versions.append(self._served_version(d, model_id, number, target.percent, backend))
            except errors.DomainError as exc:
                problems[record.deployment_id] = exc.message
                continue
            served.append(serving.ServedModel(serving_name=d.serving_name, versions=tuple(versions),
                                              direct_port=ports.get(record.deployment_id, 0)))
        self._backends = backends
        return served, problems

    async def _backend(self, d: deployment_pb2.Deployment, model_id: str, number: int) -> int:
        version = await self.registry.get_version(model_id, number)
        name = f"models/{model_id}/versions/{number}"
        if version is None:
            raise errors.NotFound(f"{name} no longer exists")
        if not (artifact_dir(self.storage_root, model_id, number) / "manifest.json").is_file():
            raise errors.FailedPrecondition(f"the artifact of {name} is missing from storage")
        validated = [b.backend for b in convert.validated_backends(version.version)]
        if d.backend:
            if d.backend not in validated:
                raise errors.FailedPrecondition(f"{name} is not validated for {model_pb2.Backend.Name(d.backend)}")
            return d.backend
        if not validated:
            raise errors.FailedPrecondition(f"{name} has no validated backend")
        return validated[0]  # the fastest

    def _served_version(self, d: deployment_pb2.Deployment, model_id: str, number: int, percent: int,
                        backend: int):
        predictor = d.predictor
        batch = d.batching.max_batch_size or 1
        wait_s = d.batching.batch_wait_timeout.ToNanoseconds() / 1e9 if d.batching.HasField("batch_wait_timeout") \
            else _DEFAULT_BATCH_WAIT_S
        autoscaling = None
        if d.HasField("autoscaling"):
            a = d.autoscaling
            autoscaling = serving.Autoscaling(min_replicas=a.min_replicas, max_replicas=a.max_replicas,
                                              target_ongoing_requests=a.target_ongoing_requests)
        res = d.resources_per_replica
        return serving.ServedVersion(
            version=str(number),
            artifact_dir=str(artifact_dir(self.storage_root, model_id, number)),
            weight=float(percent),
            backend=_BACKEND_NAMES[backend],
            predictor=serving.PredictorOptions(enable_mkldnn=predictor.enable_mkldnn,
                                               cpu_math_threads=predictor.cpu_math_threads or 1,
                                               use_gpu=predictor.use_gpu, enable_tensorrt=predictor.enable_tensorrt),
            batching=serving.Batching(max_batch_size=batch, batch_wait_timeout_s=wait_s if batch > 1 else 0.0),
            num_replicas=d.num_replicas or 1,
            autoscaling=autoscaling,
            num_cpus=res.num_cpus or 1.0,
            num_gpus=res.num_gpus,
            memory=res.memory_bytes,
        )

    async def _record_observation(self, record: DeploymentRecord, status: dict, problem: str) -> None:
        d = record.deployment
        if d.state == D.DEPLOYMENT_STATE_DELETING:
            if d.serving_name not in status:
                await self.deployments.remove(record, deployment_spec.targets(d))
            return
        observed = self.observe(d, status, problem)
        if observed != d:
            await self.deployments.write_status(record, observed)  # a user change in between wins


def _version_state(live, percent: int) -> deployment_pb2.DeploymentState:
    message = (live.message or "").lower()
    if live.state in ("FAILED", "UNHEALTHY") or (live.state == "DEPLOYING" and any(h in message for h in _PLACEMENT_HINTS)):
        return D.DEPLOYMENT_STATE_UNHEALTHY
    if live.state == "READY" and live.serving and abs(live.weight - percent) < 1e-9:
        return D.DEPLOYMENT_STATE_HEALTHY
    return D.DEPLOYMENT_STATE_DEPLOYING if live.state != "DELETING" else D.DEPLOYMENT_STATE_DELETING
