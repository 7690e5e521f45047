"""Trainer.start_run's bookkeeping, without Ray (the run's execution is not started)."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors, paging
from paddleray.services.common.identity import LOCAL
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer

pytestmark = pytest.mark.unit


@pytest.fixture
def trainer(tmp_path) -> Trainer:
    trainer = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=["pkg"]))
    trainer._spawn = lambda coro: coro.close()  # records only: no worker group is started
    trainer.load_runs()
    trainer.ray_connection.adopt()  # nothing here calls Ray: the run's execution is not started
    return trainer


async def test_concurrent_retries_of_one_request_make_one_run(trainer, tmp_path):
    (tmp_path / "data.csv").write_text("x,y\n1,2\n")
    spec = common_pb2.TrainingSpec(
        entrypoint="pkg.mod:main", datasets=[common_pb2.Dataset(name="train", uri="data.csv")]
    )
    # The second retry arrives while the first one's dataset files are being checked.
    first, second = await asyncio.gather(
        trainer.start_run(spec, request_id="req-7", caller=LOCAL), trainer.start_run(spec, request_id="req-7", caller=LOCAL)
    )
    assert first.run_id == second.run_id
    assert [r.run_id for r in trainer.registry.all()] == [first.run_id]


async def test_a_request_id_reused_by_another_request_is_refused_also_after_a_restart(trainer, tmp_path):
    spec = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    first = await trainer.start_run(spec, request_id="req-8", fingerprint=lambda _tenant: "f1", caller=LOCAL)
    assert (await trainer.start_run(spec, request_id="req-8", fingerprint=lambda _tenant: "f1", caller=LOCAL)).run_id == first.run_id
    with pytest.raises(errors.AlreadyExists, match="^request_id: already used by a different request"):
        await trainer.start_run(spec, request_id="req-8", fingerprint=lambda _tenant: "f2", caller=LOCAL)
    # run.json keeps the fingerprint: a restarted trainer judges a repeat the same way.
    restarted = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=["pkg"]))
    restarted.load_runs()
    assert restarted.registry.by_request_id("req-8").request_fp == "f1"


async def test_list_runs_pages_end_early_by_bytes(trainer):
    spec = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    spec.config.update({"blob": "x" * 900_000})
    for i in range(6):
        await trainer.start_run(spec, run_id=f"big{i}", caller=LOCAL)
    seen, token = [], ""
    while True:
        page, token = trainer.list_runs(page_token=token, caller=LOCAL)
        assert len(page) == 1 or sum(r.spec.ByteSize() for r in page) <= paging.MAX_PAGE_BYTES
        seen += [r.run_id for r in page]
        if not token:
            break
    assert sorted(seen) == [f"big{i}" for i in range(6)] and len(seen) == 6


async def test_list_runs_coerces_a_large_page_size_and_binds_tokens_to_their_filters(trainer):
    spec = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    for i in range(3):
        await trainer.start_run(spec, run_id=f"r{i}", job="jobs/a", caller=LOCAL)
    page, token = trainer.list_runs(page_size=paging.MAX_PAGE_SIZE + 1, caller=LOCAL)
    assert len(page) == 3 and token == "", "above the maximum is coerced, not rejected (AIP-158)"
    _, token = trainer.list_runs(page_size=1, job="jobs/a", caller=LOCAL)
    assert token
    with pytest.raises(errors.InvalidArgument, match="other filters"):
        trainer.list_runs(page_size=1, page_token=token, job="jobs/b", caller=LOCAL)
    assert [r.run_id for r in trainer.list_runs(page_size=1, page_token=token, job="jobs/a", caller=LOCAL)[0]] == ["r1"]
