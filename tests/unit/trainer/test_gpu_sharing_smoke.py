"""The GPU sharing smoke test's verdict on two trials' reports (GPU reports made up: no GPU here)."""

from __future__ import annotations

import pytest

from paddleray.services.trainer.gpu_sharing_smoke import problems

pytestmark = pytest.mark.unit


def _report(pid: int, uuid: str = "GPU-1", limit: int = 16160, overreach: str = "MemoryError") -> dict:
    return {
        "pid": pid, "cuda_visible_devices": "0", "gpu_uuid": uuid, "total_mb": 32320,
        "gpu_memory_limit_mb": limit, "fraction_of_gpu_memory_to_use": 0.5, "allocated_mb": 8080,
        "overreach": overreach,
    }


def test_two_capped_trials_on_one_card_pass():
    assert problems([_report(11), _report(12)]) == []


@pytest.mark.parametrize(
    ("second", "says"),
    [
        (_report(12, uuid="GPU-2"), "different GPUs"),
        (_report(11), "one process"),
        (_report(12, limit=32320), "memory cap 32320 MiB, expected 16160"),
        (_report(12, overreach="allocated"), "past its cap succeeded"),
    ],
)
def test_what_breaks_sharing_is_named(second, says):
    found = problems([_report(11), second])
    assert any(says in problem for problem in found), found


def test_a_missing_trial_fails():
    assert problems([_report(11)]) == ["expected 2 trials, got 1"]
