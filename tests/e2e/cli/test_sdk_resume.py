"""The SDK's streams survive the scheduler being SIGKILLed and restarted mid-stream: every job
event and every log line arrives exactly once, in order."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.client import Client, ConnectionConfig, Reconnect
from support.cli import MODULE, WORKERS
from support.scheduler import SchedulerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def scheduler(redis_server, cli_stack, tmp_path):
    process = SchedulerProcess(redis_server.url.rsplit("/", 1)[0] + "/4", cli_stack.address("trainer"), tmp_path,
                               entrypoint_allowlist=json.dumps([MODULE]))
    asyncio.run(process.start())
    yield process
    process.stop()


def _restart_later(scheduler: SchedulerProcess, delay_s: float = 1.5) -> threading.Thread:
    """SIGKILL now; start again after delay_s, while the client is reconnecting."""
    scheduler.kill()

    def start() -> None:
        time.sleep(delay_s)
        asyncio.run(scheduler.start())

    thread = threading.Thread(target=start)
    thread.start()
    return thread


def _slow_job(epochs: int) -> job_pb2.Job:
    job = build_job(f"{MODULE}:slow", {"epochs": epochs, "sleep_s": 0.4})
    job.spec.runtime_env.env_vars["PYTHONPATH"] = str(WORKERS)
    return job


def test_watch_job_resumes_after_the_scheduler_restarts(scheduler):
    client = Client(ConnectionConfig(address=scheduler.address), reconnect=Reconnect(give_up_after_s=120))
    job = client.create_job(_slow_job(8))
    events, restarter = [], None
    for event in client.watch_job(job.name):
        events.append(event)
        if restarter is None and event.WhichOneof("payload") == "metrics":
            restarter = _restart_later(scheduler)
    restarter.join()
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].state_change.to_state == job_pb2.JOB_STATE_SUCCEEDED
    assert [int(e.metrics.metrics["epoch"]) for e in events if e.WhichOneof("payload") == "metrics"] == list(range(1, 9))
    assert scheduler.starts == 2
    client.close()


def test_followed_logs_resume_after_the_scheduler_restarts(scheduler):
    client = Client(ConnectionConfig(address=scheduler.address), reconnect=Reconnect(give_up_after_s=120))
    job = client.create_job(_slow_job(10))
    for event in client.watch_job(job.name):
        if event.WhichOneof("payload") == "metrics":
            break
    lines, restarter = [], None
    for line in client.job_logs(job.name, follow=True):
        lines.append(line.text)
        if restarter is None and len(lines) == 2:
            restarter = _restart_later(scheduler)
    restarter.join()
    assert [text for text in lines if text.startswith("slow epoch")] == [f"slow epoch {n}" for n in range(1, 11)]
    assert client.wait_job(job.name, timeout=120).state == job_pb2.JOB_STATE_SUCCEEDED
    client.close()
