"""dispatch: CreateJob -> first line of user code on a warm cluster, vs Ray Jobs submission.

Both run the same probe (bench/dispatch_probe.py) on the same Ray head, alternating
A B A B after one warm-up each; the time is from the client's submit call to the probe's own
first-line timestamp. Ratio `first_step_vs_ray_jobs` = median paddleray / median Ray Jobs.
The smoke run skips the warm-up pair: its one paddleray round is the cold start.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from bench import harness
from paddleray.scheduler.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from paddleray.services.cli.jobs_commands import build_job
from paddleray.services.common.states import JOB_TERMINAL
from paddleray.services.localstack import stack
from paddleray.services.localstack.ports import port_open, wait_until
from paddleray.services.localstack.ray_head import AUTH_ENV, RayHead
from paddleray.services.localstack.redis_process import RedisProcess

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "bench" / "dispatch_probe.py"
TARGETS = {"first_step_vs_ray_jobs": "<= 0.05"}


def _wait_stamp(path: Path, timeout: float = 120) -> float:
    wait_until(lambda: path.exists() and path.stat().st_size > 0, timeout=timeout, interval=0.002, message=str(path))
    return float(path.read_text())


class PaddlerayDispatch:
    def __init__(self, scheduler_address: str, workdir: Path) -> None:
        self._jobs = job_service_pb2_grpc.JobServiceStub(grpc.insecure_channel(scheduler_address))
        self._workdir = workdir

    def __call__(self) -> float:
        stamp = self._workdir / f"pr-{uuid.uuid4().hex}"
        # PYTHONPATH lets the workers import bench.dispatch_probe; it is part of the warm pool's key.
        job = build_job("bench.dispatch_probe:train", {"stamp_path": str(stamp)}, workers=1, cpus=1)
        job.spec.runtime_env.env_vars["PYTHONPATH"] = str(REPO)
        started = time.time()
        created = self._jobs.CreateJob(job_service_pb2.CreateJobRequest(job=job, request_id=uuid.uuid4().hex)).job
        latency = _wait_stamp(stamp) - started
        # The next round starts on a warm cluster, as the benchmark says: wait for the job to end.
        wait_until(lambda: self._state(created.name) in JOB_TERMINAL, timeout=120, interval=0.02, message="job end")
        if self._state(created.name) != job_pb2.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"{created.name} did not succeed")
        return latency

    def _state(self, name: str) -> int:
        return self._jobs.GetJob(job_service_pb2.GetJobRequest(name=name)).job.state


class RayJobsDispatch:
    def __init__(self, dashboard_address: str, workdir: Path) -> None:
        from ray.job_submission import JobStatus, JobSubmissionClient

        self._client = JobSubmissionClient(dashboard_address)
        self._done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
        self._workdir = workdir

    def __call__(self) -> float:
        stamp = self._workdir / f"rj-{uuid.uuid4().hex}"
        started = time.time()
        job_id = self._client.submit_job(entrypoint=f"{sys.executable} {PROBE} {stamp}")
        latency = _wait_stamp(stamp) - started
        wait_until(lambda: self._client.get_job_status(job_id) in self._done, timeout=120, interval=0.05, message="ray job end")
        return latency


def run(quick: bool, smoke: bool = False) -> dict:
    rounds = 1 if smoke else 5 if quick else 15
    os.environ.update(AUTH_ENV)
    os.environ["PADDLERAY_TRAINER_ENTRYPOINT_ALLOWLIST"] = '["paddleray.services.trainer.examples", "bench.dispatch_probe"]'
    with tempfile.TemporaryDirectory(prefix="paddleray-dispatch-") as tmp:
        workdir = Path(tmp)
        redis = RedisProcess(workdir / "redis").start()
        head = RayHead(num_cpus=2, dashboard_port=0, log_file=workdir / "ray.log").start()
        try:
            state = stack.up(workdir / "stack", redis_url=redis.url, ray_address=head.address)
            paddleray = PaddlerayDispatch(state.address("scheduler"), workdir)
            wait_until(lambda: port_open(head.dashboard_port or 0), timeout=120, interval=0.5, message="Ray's dashboard (Jobs API)")
            ray_jobs = RayJobsDispatch(f"http://127.0.0.1:{head.dashboard_port}", workdir)
            cold = None
            if not smoke:
                cold = paddleray()  # the first run starts the warm pool's actors
                ray_jobs()
            measured_pr, measured_rj = harness.alternate(paddleray, ray_jobs, rounds)
        finally:
            stack.down(workdir / "stack")
            head.stop()
            redis.stop()
    median_pr, median_rj = harness.median(measured_pr), harness.median(measured_rj)
    return harness.result(
        "dispatch",
        params={"rounds": rounds, "workers": 1, "probe": "bench/dispatch_probe.py"},
        metrics={
            "paddleray_first_step_median_s": round(median_pr, 4),
            "paddleray_first_step_max_s": round(max(measured_pr), 4),
            "paddleray_cold_first_step_s": round(cold if cold is not None else measured_pr[0], 4),
            "ray_jobs_first_step_median_s": round(median_rj, 4),
            "ray_jobs_first_step_max_s": round(max(measured_rj), 4),
            "paddleray_first_step_s": measured_pr,
            "ray_jobs_first_step_s": measured_rj,
        },
        ratios={"first_step_vs_ray_jobs": round(median_pr / median_rj, 4)},
        targets=TARGETS,
        per_round={"first_step_vs_ray_jobs": harness.paired(measured_pr, measured_rj)},
        # Probes that wrote their first-line stamp, per side.
        sides={"paddleray": len(measured_pr), "ray_jobs": len(measured_rj)},
    )
