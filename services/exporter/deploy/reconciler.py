"""Runs in: the exporter process.

Reconciler: makes Ray Serve serve every recorded deployment, and records what it observes.

The desired state is the deployments' specs in Redis; one pass turns all of them into the
serving layer's ServedModel list and hands it to ServingController.apply (declarative: the
whole state, every time it changed), then reads ServingController.status() and records each
deployment's status, the reconciler's own part of the record (HEALTHY, UNHEALTHY with a
reason, replica counts, and the spec generation observed and applied: deployment_store.py's
StatusWriter, which cannot write a spec), and removes DELETING deployments once Serve no
longer serves their name. What was applied is stored, not kept in memory: a restarted
exporter whose Serve still runs the applied state does not apply it again, and one that
finds a spec written while it was away applies it. A pass runs at start-up,
after every change (wake), every interval, and again from scratch after every new connection
to the Ray cluster (a head restart: Serve and its apps are gone) -- no manual step.

A Ray head restart, step by step (the connection is services/common/ray_connection.py):
the connection sees the cluster gone and calls the app's on_lost, which calls cluster_lost()
here: the pass in flight is cancelled (it would wait on a dead GCS), every deployment is
recorded UNHEALTHY with the reason, and no pass calls Ray while the cluster is away (they fail
UNAVAILABLE, GetDeployment shows the recorded state). Once connected to the new cluster
(`generation` grew), the next pass starts Serve again (ServingController.start) and applies
every recorded deployment; each goes UPDATING, then HEALTHY when its apps run again.

Before a pass applies anything, store_guard.py tells a Redis that came back empty from a user's
deletes: while the store looks lost nothing is applied or deleted.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
from pathlib import Path

from paddleray.exporter.v1 import deployment_pb2, model_pb2
from paddleray.services.common import errors, model_manifest, names
from paddleray.services.common.ray_connection import RayConnection, in_daemon_thread
from paddleray.services.exporter.deploy import deployment_spec
from paddleray.services.exporter.export.exports import artifact_dir
from paddleray.services.exporter.registry import convert
from paddleray.services.exporter.serving import spec as serving
from paddleray.services.exporter.serving.control.ownership import ServeOwnership
from paddleray.services.exporter.serving.control.serve_status import VersionState, VersionStatus
from paddleray.services.exporter.store.deployment_store import DeploymentRecord, DeploymentStore
from paddleray.services.exporter.store.registry_store import RegistryStore
from paddleray.services.exporter.store.store_guard import StoreGuard

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
                 storage_root: str | Path, interval_s: float = 5.0, ownership: ServeOwnership | None = None) -> None:
        """ownership: checked before Serve is touched (another installation's Serve is left alone)."""
        self.deployments = deployments
        self._statuses = deployments.status_writer  # the one writer of the reconciler's part
        self.ownership = ownership
        self._ownership_unchecked = False
        self.guard = StoreGuard(deployments, self._serve_owner)
        self._served_recorded: list[str] | None = None
        self.registry = registry
        self.controller = controller
        self.ray = ray
        self.storage_root = os.fspath(storage_root)  # a path or an s3:// URI (common.storage)
        self.interval_s = interval_s
        self._wake = asyncio.Event()
        self._generation = 0  # of the Ray connection the served state was applied on
        self._pass: asyncio.Task | None = None
        self._started = False
        self._applied: str | None = None
        self._apply_error = ""
        self._problems: dict[str, str] = {}  # deployment id -> why the last pass could not serve it
        # True until the first pass on this exporter's first connection: Serve may already run
        # what an earlier exporter applied (the stored fingerprint says what that was).
        self._may_resume = True
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
        if not await self.guard.check(records, self._served_recorded):
            return  # the store looks lost: Serve keeps what it serves, nothing is deleted
        if not records and not self._started:
            return  # nothing to serve: Serve (and the ports it opens) starts with the first deployment
        if self.ownership is not None and not await self._own_serve(records):
            return
        active = [r for r in records if r.deployment.state != D.DEPLOYMENT_STATE_DELETING]
        served, problems = await self._desired(active)
        if not self._started:
            # With the names to serve: until each model's app answers again (a fresh Serve after a
            # head restart), the server app says UNAVAILABLE for it, not NOT_FOUND.
            await self.controller.start(known=[m.serving_name for m in served])
            self._started = True
        self._problems = problems
        fingerprint = hashlib.sha256(repr(served).encode()).hexdigest()
        status = None
        if fingerprint != self._applied and self._may_resume:
            status = await self.controller.status()
            if await self.deployments.applied_fingerprint() == fingerprint and _serves(status, served):
                self._applied, self._apply_error = fingerprint, ""  # an earlier exporter applied it
        self._may_resume = False
        if fingerprint != self._applied:
            try:
                await self.controller.apply(served)
                self._applied, self._apply_error = fingerprint, ""
                await self._statuses.record_applied(fingerprint)
                await self._record_served([m.serving_name for m in served])
                await self.guard.applied()
            except errors.DomainError as exc:
                # Applied as a whole: nothing changed, and every deployment says why.
                self._applied, self._apply_error = fingerprint, exc.message
            status = None
        # Serve's status shows a new routing table as soon as it is deployed, before the ingress
        # routes by it: a deployment is HEALTHY only once an apply of its current spec returned
        # (its applied_gen, recorded with the status below).
        applied = not self._apply_error
        status = status if status is not None else await self.controller.status()
        for record in records:
            await self._record_observation(record, status, problems.get(record.deployment_id, ""), applied)
        self.passes += 1

    async def _serve_owner(self) -> dict | None:
        """Serve's manager as the GCS records it (ownership.owner), for the store guard."""
        if self.ownership is None:
            return None
        try:
            return await in_daemon_thread(self.ownership.owner)
        except Exception:  # noqa: BLE001 - no GCS key-value store to ask (Ray Client): nothing known
            return None

    async def _record_served(self, names: list[str]) -> None:
        """What Serve runs for this installation, in the GCS (an exporter without its store reads it)."""
        ownership = self.ownership
        if ownership is None or sorted(names) == self._served_recorded:
            return
        try:
            await in_daemon_thread(lambda: ownership.record_served(names))
            self._served_recorded = sorted(names)
        except Exception as exc:  # noqa: BLE001 - no GCS key-value store (Ray Client): the guard knows less
            log.debug("could not record the served models in the GCS: %r", exc)

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
                    await self._record_observation(record, {}, exc.message, applied=False)
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
        self._started, self._applied, self._apply_error, self._may_resume = False, None, "", False
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
                status.ClearField("replicas_per_node")
            await self._statuses.write(record, observed, applied=False)

    async def live(self, record: DeploymentRecord) -> deployment_pb2.Deployment:
        """The deployment with Serve's state now (GetDeployment); the stored one while the Ray
        cluster is away or Serve does not answer in time."""
        if not self.ray.connected:
            return record.deployment
        try:
            status = await asyncio.wait_for(self.controller.status(), _STATUS_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - Ray away: show the last observation
            return record.deployment
        # What the last pass found wrong with it (a version gone, its artifact missing from
        # storage): Serve's status alone would show such a deployment as still starting.
        return self.observe(record, status, self._problems.get(record.deployment_id, ""))

    def observe(self, record: DeploymentRecord, status: dict, problem: str = "",
                applied: bool | None = None) -> deployment_pb2.Deployment:
        """What Serve's status says of the deployment; `applied`: whether an apply of this spec
        generation returned (None: as recorded)."""
        deployment = record.deployment
        applied = record.applied if applied is None else applied
        observed = deployment_pb2.Deployment()
        observed.CopyFrom(deployment)
        observed.ClearField("version_statuses")
        model = status.get(deployment.serving_name)
        states, unanswered = [], []
        for target in deployment.traffic:
            number = names.MODEL_VERSION.parse(target.model_version, "traffic.model_version")["version"]
            live = model.versions.get(number) if model is not None else None
            entry = observed.version_statuses.add(
                model_version=target.model_version,
                backend=self._backends.get((deployment.serving_name, number), deployment.backend),
            )
            if live is None:
                entry.state = D.DEPLOYMENT_STATE_DEPLOYING
            else:
                entry.running_replicas, entry.target_replicas = live.running_replicas, live.target_replicas
                for node_id, node_ip, count in live.replicas_per_node:
                    entry.replicas_per_node.add(node_id=node_id, node_ip=node_ip, running_replicas=count)
                entry.message = live.message
                entry.state = _version_state(live, target.percent)
                if (entry.state == D.DEPLOYMENT_STATE_UNHEALTHY and not live.answered
                        and deployment.state in (D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING)):
                    # Serve runs the replicas, but clients are not answered yet: HAProxy's first
                    # health checks of a backend it just added answer 503 for a moment. Not HEALTHY
                    # (issue 21.10) and not a failure either: still deploying, saying why. Once
                    # HEALTHY, an endpoint that stops answering makes the deployment UNHEALTHY.
                    entry.state = D.DEPLOYMENT_STATE_DEPLOYING
                    unanswered.append(entry)
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
        elif all(s.state == D.DEPLOYMENT_STATE_HEALTHY for s in states) and applied:
            # HEALTHY; the reason says where the endpoints are when not on the configured ports.
            observed.state, observed.state_reason = D.DEPLOYMENT_STATE_HEALTHY, getattr(self.controller, "endpoint_note", "")
        elif unanswered:
            observed.state_reason = f"{unanswered[0].model_version}: {unanswered[0].message}"
        elif deployment.state not in (D.DEPLOYMENT_STATE_DEPLOYING, D.DEPLOYMENT_STATE_UPDATING):
            observed.state, observed.state_reason = D.DEPLOYMENT_STATE_UPDATING, "replicas are (re)starting"
        return observed

    async def _follow_cluster(self) -> None:
        # UNAVAILABLE while the cluster is away: nothing is asked of Ray then.
        self.ray.require()
        if self.ray.generation != self._generation:
            if self._generation:
                log.warning("connected to the Ray cluster again: starting Serve and deploying every deployment again")
            # A new cluster (not the first connection) has no Serve: nothing applied survives.
            self._may_resume = self._may_resume and not self._generation
            self._generation, self._started, self._applied = self.ray.generation, False, None
            self._served_recorded = None

    async def _desired(self, records: list[DeploymentRecord]) -> tuple[list, dict[str, str]]:
        served, problems = [], {}
        backends: dict[tuple[str, str], int] = {}
        for record in records:
            d = record.deployment
            versions = []
            try:
                for (model_id, number), target in zip(deployment_spec.targets(d), d.traffic, strict=True):
                    backend = await self._backend(d, model_id, number)
                    backends[d.serving_name, str(number)] = backend
                    versions.append(serving.ServedVersion(
                        version=str(number), artifact_dir=str(artifact_dir(self.storage_root, model_id, number)),
                        weight=float(target.percent), backend=_BACKEND_NAMES[backend]))
            except errors.DomainError as exc:
                problems[record.deployment_id] = exc.message
                continue
            served.append(self._served_model(d, versions))
        self._backends = backends
        return served, problems

    async def _backend(self, d: deployment_pb2.Deployment, model_id: str, number: int) -> int:
        version = await self.registry.get_version(model_id, number)
        name = names.MODEL_VERSION.format(model=model_id, version=number)
        if version is None:
            raise errors.NotFound(f"{name} no longer exists")
        # On an object store, a request: off the loop.
        if not await in_daemon_thread(functools.partial(
                model_manifest.exists, artifact_dir(self.storage_root, model_id, number))):
            raise errors.FailedPrecondition(f"the artifact of {name} is missing from storage")
        validated = [b.backend for b in convert.validated_backends(version.version)]
        if d.backend:
            if d.backend not in validated:
                raise errors.FailedPrecondition(f"{name} is not validated for {model_pb2.Backend.Name(d.backend)}")
            return d.backend
        if not validated:
            raise errors.FailedPrecondition(f"{name} has no validated backend")
        return validated[0]  # the fastest

    def _served_model(self, d: deployment_pb2.Deployment, versions: list) -> serving.ServedModel:
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
        return serving.ServedModel(
            serving_name=d.serving_name,
            versions=tuple(versions),
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

    async def _record_observation(self, record: DeploymentRecord, status: dict, problem: str,
                                  applied: bool) -> None:
        d = record.deployment
        if d.state == D.DEPLOYMENT_STATE_DELETING:
            if d.serving_name not in status:
                await self._statuses.remove(record, deployment_spec.targets(d))
            return
        # An apply that returned covered this generation (a spec written since has a later one).
        applied = record.applied or (applied and self._applied is not None)
        observed = self.observe(record, status, problem, applied)
        if observed != d or applied != record.applied:
            await self._statuses.write(record, observed, applied=applied)


def _version_state(live: VersionStatus, percent: int) -> deployment_pb2.DeploymentState:
    message = (live.message or "").lower()
    if live.state in (VersionState.FAILED, VersionState.UNHEALTHY) or (
            live.state is VersionState.DEPLOYING and any(h in message for h in _PLACEMENT_HINTS)):
        return D.DEPLOYMENT_STATE_UNHEALTHY
    if live.state is VersionState.READY and live.serving and abs(live.weight - percent) < 1e-9:
        return D.DEPLOYMENT_STATE_HEALTHY
    return D.DEPLOYMENT_STATE_DELETING if live.state is VersionState.DELETING else D.DEPLOYMENT_STATE_DEPLOYING


def _serves(status: dict, served: list) -> bool:
    """Whether Serve runs every served model with exactly its versions (what a restarted
    exporter finds when the cluster outlived it)."""
    return all(m.serving_name in status and set(status[m.serving_name].versions) == {v.version for v in m.versions}
               for m in served)
