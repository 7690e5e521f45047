"""Prometheus metrics and structured logs of the scheduler."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import REGISTRY

from paddleray.services.common.logs import JsonFormatter
from support.scheduler import make_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_metrics_count_dispatches_retries_and_timeouts(stack_factory):
    retries = _value("paddleray_scheduler_retries_total")
    timeouts = _value("paddleray_scheduler_timeouts_total")
    dispatched = _value("paddleray_scheduler_dispatch_seconds_count")
    queued = _value("paddleray_scheduler_time_in_queue_seconds_count")
    async with stack_factory() as stack:
        flaky = await stack.create(make_job(config={"fail_at_step": 1}, max_retries=1), job_id="flaky")
        slow = await stack.create(make_job(config={"hang": True}, timeout_s=0.5), job_id="slow")
        await stack.wait_terminal(flaky.name)
        await stack.wait_terminal(slow.name)
        await stack.app.dispatcher._export_stats()
    assert _value("paddleray_scheduler_retries_total") == retries + 1
    assert _value("paddleray_scheduler_timeouts_total") == timeouts + 1
    assert _value("paddleray_scheduler_dispatch_seconds_count") >= dispatched + 3
    assert _value("paddleray_scheduler_time_in_queue_seconds_count") >= queued + 3
    assert _value("paddleray_scheduler_jobs", state="SUCCEEDED") == 1
    assert _value("paddleray_scheduler_jobs", state="TIMED_OUT") == 1
    assert _value("paddleray_scheduler_queue_depth") == 0


async def test_follower_logs_carry_job_and_attempt(stack_factory):
    lines: list[dict] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            # Formatted at emit time, inside the log_context of the code that logged.
            lines.append(json.loads(JsonFormatter().format(record)))

    logger = logging.getLogger("paddleray.services.scheduler")
    handler = Capture(logging.INFO)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with stack_factory() as stack:
            job = await stack.create(make_job(config={"steps": 1}), job_id="logged")
            await stack.wait_terminal(job.name)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    started = [line for line in lines if line["msg"].startswith("attempt started")]
    assert started and started[0]["job"] == "logged" and started[0]["attempt"] == 1
