"""Issue 21 points 11 and 13: the services around a Redis restart.

11. A create whose reply was lost (Redis ran it, then went away) is answered UNAVAILABLE; the
    client's retry with the same request_id gets that very job, and nothing is created twice.
    Once Redis is back, no call fails on a connection the restart left dead.
13. The exporter logs an outage once when it starts and once when it ends, no traceback.

The scheduler runs in-process behind a real gRPC server, on a real redis-server (AOF, fsync
always) reached through a TCP proxy that loses a reply on cue; Redis itself is SIGKILLed and
restarted on its port. The exporter is a real process.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import redis

from paddleray.scheduler.v1 import job_pb2, job_service_pb2_grpc
from paddleray.scheduler.v1 import job_service_pb2 as js
from paddleray.services.localstack.health import serving
from paddleray.services.localstack.redis_process import RedisProcess
from paddleray.services.scheduler import keys
from paddleray.services.scheduler.__main__ import registrations
from paddleray.services.scheduler.app import SchedulerApp
from paddleray.services.scheduler.settings import SchedulerSettings
from support import free_port, wait_until
from support.exporter import AppThread, ExporterProcess
from support.scheduler import make_job
from support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.timeout(180)]
C = grpc.StatusCode


def _create(stub, request_id: str) -> tuple[grpc.StatusCode, str]:
    try:
        job = stub.CreateJob(js.CreateJobRequest(job=make_job(), request_id=request_id), timeout=20).job
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return C.OK, job.name


def test_a_create_retried_after_a_redis_restart_gets_its_job_and_nothing_fails_once_redis_is_back(
        tmp_path, fault_figures):
    store = RedisProcess(tmp_path / "redis", durable=True).start()
    proxy = TcpProxy(store.port)
    config = SchedulerSettings(port=0, redis_url=f"redis://127.0.0.1:{proxy.port}/0", dispatch=False,
                               trainer_address=f"127.0.0.1:{free_port()}", storage_root=tmp_path / "storage",
                               entrypoint_allowlist=["pkg"], store_check_interval_s=0.2)
    app = AppThread(config, SchedulerApp, registrations)
    direct = redis.Redis.from_url(store.url)  # the test's own view of Redis, past the proxy
    pool = ThreadPoolExecutor(32)
    try:
        with grpc.insecure_channel(app.address) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            # Enough calls at once that the scheduler's pool holds many connections.
            before = list(pool.map(lambda i: _create(stub, f"before-{i}"), range(64)))
            assert {code for code, _ in before} == {C.OK}

            # Redis runs the create, its reply is lost, then Redis goes away.
            proxy.swallow_replies()
            lost = pool.submit(_create, stub, "lost-reply")
            wait_until(lambda: direct.exists(keys.request("lost-reply")), timeout=20, interval=0.02,
                       message="Redis to run the create")
            proxy.refuse()
            proxy.cut()
            code, details = lost.result(30)
            assert code == C.UNAVAILABLE, (code, details)
            created_id = direct.get(keys.request("lost-reply")).decode()

            store.kill()
            store.start()  # the same port and append-only file: every acknowledged write is there
            proxy.restore()
            back = time.monotonic()
            # Redis answers again: from the first call on, none fails on a connection the restart left dead.
            after = list(pool.map(lambda i: _create(stub, f"after-{i}"), range(64)))
            recovered_s = time.monotonic() - back
            stale = [(code, details) for code, details in after if code != C.OK]
            assert stale == [], stale[:3]

            # The client retries the create it was told failed: it gets the job Redis made.
            code, name = _create(stub, "lost-reply")
            assert code == C.OK and name == f"jobs/{created_id}", (code, name)
            listed = stub.ListJobs(js.ListJobsRequest(page_size=1000, view=job_pb2.JOB_VIEW_BASIC), timeout=10).jobs
            names = [j.name for j in listed]
            assert len(names) == len(set(names)) == 64 + 1 + 64, len(names)
            assert names.count(name) == 1
        fault_figures.record(faults_injected=2, jobs_submitted=129, jobs_lost=0, jobs_duplicated=0,
                             creates_answered_unavailable_though_made=1, calls_failed_after_redis_back=len(stale),
                             redis_back_to_64_creates_s=round(recovered_s, 2))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        app.stop()
        proxy.close()
        direct.close()
        store.stop()


def test_the_exporter_logs_a_redis_outage_once_without_a_traceback(ray_head, tmp_path, fault_figures):
    # A restart that keeps the data (AOF): one without it is a lost store, which freezes serving
    # on purpose (point 4, test_lost_store.py), and the exporter then stays NOT_SERVING.
    store = RedisProcess(tmp_path / "redis", durable=True).start()
    exporter = ExporterProcess(store.url, ray_head.address, tmp_path / "storage", tmp_path,
                               RECONCILE_INTERVAL_S="0.5")  # sweeps, health checks and passes every 0.5 s
    try:
        exporter.wait_serving()
        store.kill()
        wait_until(lambda: not serving(exporter.address), timeout=30, interval=0.1, message="NOT_SERVING")
        down = exporter.log.read_text()
        time.sleep(6)  # a dozen passes of every loop
        during = exporter.log.read_text()[len(down):]
        store.start()
        exporter.wait_serving(timeout=60)
        log = exporter.log.read_text()
        assert "serving frozen" not in log, log[-3000:]
    finally:
        exporter.stop()
        store.stop()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("exporter store outage: Redis cannot be reached") == 1, log[-3000:]
    assert log.count("exporter store reachable again") == 1, log[-3000:]
    assert during.strip() == "", during[-3000:]  # nothing per pass while Redis stays away
    fault_figures.record(faults_injected=1, log_lines_during_6_s_outage=len(during.splitlines()),
                         outage_lines=log.count("store outage"), tracebacks=log.count("Traceback"))
