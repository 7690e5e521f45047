"""A deployment has two parts with one writer each (deployment_store.py): the spec, written only
by DeploymentManager through SpecWriter, and the status, written only by the Reconciler through
StatusWriter. Neither can write the other's part; what was applied is stored, so a restarted
exporter neither applies again what Serve runs nor misses a spec written while it was away; and
records of the layout before the split read as they did. Real Redis, in-test Serve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import field_mask_pb2

from paddleray.exporter.v1 import deployment_pb2
from paddleray.services.common.identity import LOCAL
from paddleray.services.exporter.deploy.reconciler import Reconciler
from paddleray.services.exporter.store import keys
from paddleray.services.exporter.store.deployment_store import SPEC_STATES, STATUS_STATES
from support.exporter import ready_version
from support.serve_fakes import Controller

pytestmark = pytest.mark.unit
D = deployment_pb2.DeploymentState
SERVICES = Path(__file__).resolve().parents[3] / "services"
LUA = SERVICES / "exporter" / "store" / "lua"
SPEC_FIELDS = {"proto", "gen", "member", "serving_name", "request_fp"}
STATUS_FIELDS = {"status", "observed_gen", "applied_gen"}


def _traffic(*numbers: int, **fields) -> deployment_pb2.Deployment:
    share = 100 // len(numbers)
    return deployment_pb2.Deployment(traffic=[
        deployment_pb2.TrafficTarget(model_version=f"models/digits/versions/{n}", percent=share) for n in numbers],
        **fields)


async def _fields(raw_redis, deployment_id: str, names: set[str]) -> dict:
    values = await raw_redis.hmget(keys.deployment(deployment_id), sorted(names))
    return dict(zip(sorted(names), values, strict=True))


def test_the_states_each_party_writes_are_apart_but_for_the_intents():
    assert D.DEPLOYMENT_STATE_DELETING in SPEC_STATES - STATUS_STATES
    assert {D.DEPLOYMENT_STATE_HEALTHY, D.DEPLOYMENT_STATE_UNHEALTHY} <= STATUS_STATES - SPEC_STATES


async def test_the_reconciler_cannot_write_the_spec(manager, reconciler, deployment_store, store, raw_redis, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    record = await deployment_store.get("prod")
    spec_before = await _fields(raw_redis, "prod", SPEC_FIELDS)
    # An observation that also carries spec changes (other traffic, another serving name).
    observed = _traffic(2, name="deployments/prod", serving_name="other", state=D.DEPLOYMENT_STATE_HEALTHY)
    assert await deployment_store.status_writer.write(record, observed, applied=True)
    assert await _fields(raw_redis, "prod", SPEC_FIELDS) == spec_before
    stored = await deployment_store.get("prod")
    assert stored.spec == record.spec and stored.gen == record.gen
    assert stored.deployment.state == D.DEPLOYMENT_STATE_HEALTHY and stored.deployment.serving_name == "prod"
    with pytest.raises(ValueError, match="DEPLOYMENT_STATE_DELETING"):
        await deployment_store.status_writer.write(record, deployment_pb2.Deployment(state=D.DEPLOYMENT_STATE_DELETING))
    # A deployment removed meanwhile is not made again by a late status write.
    assert await deployment_store.status_writer.remove(stored, [("digits", 1)])
    assert not await deployment_store.status_writer.write(stored, observed)
    assert not await raw_redis.exists(keys.deployment("prod"))


async def test_the_manager_cannot_write_the_status(manager, reconciler, deployment_store, store, raw_redis, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    await reconciler.reconcile()
    status_before = await _fields(raw_redis, "prod", STATUS_FIELDS)
    assert status_before["status"] is not None and status_before["observed_gen"] == b"1"
    # An update whose body claims a status: the output-only fields are not the user's to set.
    body = _traffic(1, 2, name="deployments/prod", state=D.DEPLOYMENT_STATE_HEALTHY, state_reason="fine")
    body.version_statuses.add(model_version="models/digits/versions/9", running_replicas=7)
    updated = await manager.update(LOCAL, body, field_mask_pb2.FieldMask(paths=["traffic"]))
    assert updated.state == D.DEPLOYMENT_STATE_UPDATING
    assert await _fields(raw_redis, "prod", STATUS_FIELDS) == status_before
    stored = await deployment_store.get("prod")
    assert stored.gen == 2 and stored.observed_gen == 1 and not stored.applied
    assert stored.deployment.state == D.DEPLOYMENT_STATE_UPDATING  # the new intent, not the old observation
    assert [s.running_replicas for s in stored.deployment.version_statuses] == [1]  # still what is running
    await manager.delete(LOCAL, "deployments/prod")
    assert await _fields(raw_redis, "prod", STATUS_FIELDS) == status_before
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_DELETING
    # Nor through the writer itself: a spec saying HEALTHY is refused before anything is sent.
    with pytest.raises(ValueError, match="DEPLOYMENT_STATE_HEALTHY"):
        await deployment_store.spec_writer.update(stored, _traffic(1, name="deployments/prod",
                                                                   state=D.DEPLOYMENT_STATE_HEALTHY), [], [])


async def test_an_observation_of_an_older_spec_neither_wins_nor_is_lost(manager, reconciler, deployment_store, store,
                                                                        tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    old = await deployment_store.get("prod")
    await manager.update(LOCAL, _traffic(1, 2, name="deployments/prod"), field_mask_pb2.FieldMask(paths=["traffic"]))
    new = await deployment_store.get("prod")
    healthy = deployment_pb2.Deployment(state=D.DEPLOYMENT_STATE_HEALTHY)
    healthy.version_statuses.add(model_version="models/digits/versions/1", running_replicas=1)
    # The reconciler observed generation 1 while the user wrote 2: recorded, but generation 2 is shown UPDATING.
    assert await deployment_store.status_writer.write(old, healthy)
    shown = (await deployment_store.get("prod")).deployment
    assert shown.state == D.DEPLOYMENT_STATE_UPDATING and len(shown.traffic) == 2
    assert await deployment_store.status_writer.write(new, healthy)
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY
    # Once generation 2 is observed, a late write about generation 1 is refused.
    assert not await deployment_store.status_writer.write(old, deployment_pb2.Deployment(state=D.DEPLOYMENT_STATE_UNHEALTHY))
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY


async def test_a_restarted_exporter_knows_which_generation_was_applied(
        manager, reconciler, deployment_store, store, controller, cluster, tmp_path):
    for _ in range(2):
        await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    await reconciler.reconcile()
    assert len(controller.applied) == 1 and (await deployment_store.get("prod")).applied
    # The exporter restarts; Serve (and the cluster) outlived it: nothing is applied again.
    restarted = Reconciler(deployment_store, store, controller, cluster, tmp_path)
    await restarted.reconcile()
    assert len(controller.applied) == 1 and controller.starts == 2  # attached to the running Serve
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY
    # A spec written while the exporter was away (no pass ran): the next exporter applies it once.
    await manager.update(LOCAL, _traffic(1, 2, name="deployments/prod"), field_mask_pb2.FieldMask(paths=["traffic"]))
    assert not (await deployment_store.get("prod")).applied
    again = Reconciler(deployment_store, store, controller, cluster, tmp_path)
    await again.reconcile()
    assert len(controller.applied) == 2 and [v.weight for v in controller.applied[-1][0].versions] == [50.0, 50.0]
    record = await deployment_store.get("prod")
    assert record.applied and record.applied_gen == 2 and record.deployment.state == D.DEPLOYMENT_STATE_HEALTHY
    await again.reconcile()
    assert len(controller.applied) == 2


async def test_a_restarted_exporter_applies_again_what_serve_no_longer_runs(
        manager, reconciler, deployment_store, store, cluster, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    await reconciler.reconcile()
    # The cluster restarted with the exporter: a fresh Serve runs nothing, whatever was applied before.
    empty = Controller()
    restarted = Reconciler(deployment_store, store, empty, cluster, tmp_path)
    await restarted.reconcile()
    assert [m.serving_name for m in empty.applied[-1]] == ["prod"]
    assert (await deployment_store.get("prod")).deployment.state == D.DEPLOYMENT_STATE_HEALTHY


async def test_a_record_of_the_old_layout_reads_and_reconciles(manager, reconciler, deployment_store, store, controller,
                                                               raw_redis, tmp_path):
    await ready_version(store, tmp_path, "digits")
    await manager.create(LOCAL, "prod", _traffic(1), "")
    # As the code before the split stored it: one proto, HEALTHY written over it by the reconciler
    # (each of its writes bumped gen), and no status fields.
    old = (await deployment_store.get("prod")).deployment
    old.state, old.state_reason = D.DEPLOYMENT_STATE_HEALTHY, "on port 9000"
    old.version_statuses.add(model_version="models/digits/versions/1", running_replicas=1,
                             state=D.DEPLOYMENT_STATE_HEALTHY)
    await raw_redis.hset(keys.deployment("prod"), mapping={"proto": old.SerializeToString(), "gen": 3})
    record = await deployment_store.get("prod")
    assert record.deployment == old and record.gen == 3 and record.spec.state == D.DEPLOYMENT_STATE_UPDATING
    assert record.applied  # the old reconciler recorded HEALTHY only once an apply of the spec returned
    await reconciler.reconcile()
    record = await deployment_store.get("prod")
    assert len(controller.applied) == 1 and record.applied and record.deployment.state == D.DEPLOYMENT_STATE_HEALTHY
    updated = await manager.update(LOCAL, _traffic(1, name="deployments/prod", num_replicas=2),
                                   field_mask_pb2.FieldMask(paths=["num_replicas"]))
    assert updated.state == D.DEPLOYMENT_STATE_UPDATING and (await deployment_store.get("prod")).gen == 4


def _hset_fields(script: str) -> set[str]:
    """The literal field names a Lua script's HSET calls on KEYS[...] write."""
    found = set()
    for args in re.findall(r'redis\.call\("HSET", KEYS\[[^]]+\], ([^)]*)\)', script):
        found |= set(re.findall(r'"([a-z_]+)"', args))
    return found


def test_each_partys_scripts_write_only_its_fields():
    spec_scripts = ("create_deployment.lua", "update_deployment.lua")
    for name in spec_scripts:
        written = _hset_fields((LUA / name).read_text())
        assert written and written <= SPEC_FIELDS, (name, written)
    written = _hset_fields((LUA / "write_deployment_status.lua").read_text())
    assert written == STATUS_FIELDS
    assert _hset_fields('redis.call("HSET", KEYS[1], "status", ARGV[2], "proto", ARGV[3])') == {"status", "proto"}


def test_only_the_manager_writes_specs_and_only_the_reconciler_statuses():
    writers = {"spec_writer": set(), "status_writer": set()}
    for path in SERVICES.rglob("*.py"):
        if path.name == "deployment_store.py":  # where the writers are made
            continue
        text = path.read_text()
        for writer, users in writers.items():
            if re.search(rf"\.{writer}\b", text):
                users.add(path.relative_to(SERVICES).as_posix())
    assert writers == {"spec_writer": {"exporter/deploy/deployments.py"}, "status_writer": {"exporter/deploy/reconciler.py"}}
