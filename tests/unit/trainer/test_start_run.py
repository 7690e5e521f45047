"""Trainer.start_run's bookkeeping, without Ray (the run's execution is not started)."""

from __future__ import annotations

import asyncio

import pytest

from paddleray.common.v1 import common_pb2
from paddleray.services.trainer.settings import TrainerSettings
from paddleray.services.trainer.trainer import Trainer

pytestmark = pytest.mark.unit


async def test_concurrent_retries_of_one_request_make_one_run(tmp_path):
    (tmp_path / "data.csv").write_text("x,y\n1,2\n")
    trainer = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=["pkg"]))
    trainer._spawn = lambda coro: coro.close()  # records only: no worker group is started
    trainer.load_runs()
    trainer.ray_connection.adopt()  # nothing here calls Ray: the run's execution is not started
    spec = common_pb2.TrainingSpec(
        entrypoint="pkg.mod:main", datasets=[common_pb2.Dataset(name="train", uri="data.csv")]
    )
    # The second retry arrives while the first one's dataset files are being checked.
    first, second = await asyncio.gather(
        trainer.start_run(spec, request_id="req-7"), trainer.start_run(spec, request_id="req-7")
    )
    assert first.run_id == second.run_id
    assert [r.run_id for r in trainer.registry.all()] == [first.run_id]


async def test_list_runs_pages_end_early_by_bytes(tmp_path):
    from paddleray.services.common import paging

    trainer = Trainer(TrainerSettings(storage_root=tmp_path, entrypoint_allowlist=["pkg"]))
    trainer._spawn = lambda coro: coro.close()
    trainer.load_runs()
    trainer.ray_connection.adopt()
    spec = common_pb2.TrainingSpec(entrypoint="pkg.mod:main")
    spec.config.update({"blob": "x" * 900_000})
    for i in range(6):
        await trainer.start_run(spec, run_id=f"big{i}")
    seen, token = [], ""
    while True:
        page, token = trainer.list_runs(page_token=token)
        assert len(page) == 1 or sum(r.spec.ByteSize() for r in page) <= paging.MAX_PAGE_BYTES
        seen += [r.run_id for r in page]
        if not token:
            break
    assert sorted(seen) == [f"big{i}" for i in range(6)] and len(seen) == 6
