"""A scripted TrainerService speaking real gRPC: the only fake in the scheduler's tests.

Each run follows the script in its spec's config:
  steps (default 3)         metrics reports, one per step, `step_s` apart (default 0.02)
  checkpoint_every          a checkpoint event every N steps (default: none)
  fail_at_step, fail_times  the run fails at that step, for the first `fail_times` attempts
                            of the job (default 1); a resumed run starts after its checkpoint
  fail_kind                 the FailureKind name that failure carries (default USER_CODE)
  start_error, start_error_times
                            StartRun answers with that status code name (UNAVAILABLE,
                            INTERNAL, INVALID_ARGUMENT, ...) the first `start_error_times`
                            times it is called for the job (default: always)
  hang                      never finishes on its own (until StopRun or its timeout)
  lose_at_step              the trainer forgets the run at that step (as if it restarted)
It counts StartRun calls and runs created per request_id, which is what the tests assert on.
Cluster resources: `total` as configured; `available` is total minus what live runs hold.
With node_cpus, the cluster is those nodes: each worker of a run goes to the node with the most
CPUs free (as Ray spreads single bundles), and a run placed where it does not fit is recorded
in `overcommitted` (must stay empty).
"""

from __future__ import annotations

import asyncio
import collections
import itertools

import grpc
from google.protobuf import json_format, timestamp_pb2

from paddleray.common.v1 import common_pb2
from paddleray.services.common import states, training_spec
from paddleray.trainer.v1 import run_pb2, trainer_service_pb2_grpc
from paddleray.trainer.v1 import trainer_service_pb2 as ts

R = run_pb2.RunState
TERMINAL = states.RUN_TERMINAL


def _now() -> timestamp_pb2.Timestamp:
    ts_ = timestamp_pb2.Timestamp()
    ts_.GetCurrentTime()
    return ts_


class FakeRun:
    def __init__(self, run: run_pb2.Run) -> None:
        self.run = run
        self.events: list[run_pb2.RunEvent] = []
        self.changed = asyncio.Condition()
        self.task: asyncio.Task | None = None

    async def emit(self, **payload) -> None:
        async with self.changed:
            self.events.append(run_pb2.RunEvent(sequence=len(self.events) + 1, time=_now(), **payload))
            self.changed.notify_all()

    async def set_state(self, state: int, reason: str = "", failure: common_pb2.Failure | None = None) -> None:
        old = self.run.state
        self.run.state, self.run.state_reason = state, reason
        if failure is not None:
            self.run.failure.CopyFrom(failure)
        await self.emit(state_change=run_pb2.RunStateChange(from_state=old, to_state=state, reason=reason,
                                                            failure=failure))


class FakeTrainer(trainer_service_pb2_grpc.TrainerServiceServicer):
    def __init__(self, cpus: float = 4, gpus: float = 0, memory: int = 64 << 30,
                 node_cpus: list[float] | None = None) -> None:
        self.node_cpus = list(node_cpus or [])
        cpus = sum(self.node_cpus) if node_cpus else cpus
        self.total = run_pb2.ResourceAmounts(num_cpus=cpus, num_gpus=gpus, memory_bytes=memory)
        self.placement: dict[str, list[int]] = {}  # run name -> node index per worker
        # StartRun takes this long before the run holds anything (as Ray takes to place a group).
        self.start_delay_s = 0.0
        self.overcommitted: set[str] = set()
        self.runs: dict[str, FakeRun] = {}
        self.by_request: dict[str, str] = {}
        self.start_calls: collections.Counter[str] = collections.Counter()
        self.job_start_calls: collections.Counter[str] = collections.Counter()
        self.runs_created: collections.Counter[str] = collections.Counter()
        self.stop_calls: collections.Counter[str] = collections.Counter()
        self.job_attempts: collections.Counter[str] = collections.Counter()
        self.max_concurrent_gpu = 0.0
        # Jobs that ever had two live runs at once (must stay empty).
        self.overlapping_jobs: set[str] = set()
        self._ids = itertools.count(1)

    # -- test helpers -----------------------------------------------------------------------

    def live(self) -> list[FakeRun]:
        return [r for r in self.runs.values() if r.run.state not in TERMINAL]

    def runs_of(self, job: str) -> list[run_pb2.Run]:
        return [r.run for r in self.runs.values() if r.run.job == job]

    # -- TrainerService ------------------------------------------------------------------

    async def StartRun(self, request: ts.StartRunRequest, context) -> ts.StartRunResponse:
        self.start_calls[request.request_id] += 1
        self.job_start_calls[request.job] += 1
        script = json_format.MessageToDict(request.spec.config)
        if "start_error" in script and self.job_start_calls[request.job] <= int(script.get("start_error_times", 1e9)):
            await context.abort(grpc.StatusCode[script["start_error"]], f"scripted {script['start_error']}")
        if self.start_delay_s:
            await asyncio.sleep(self.start_delay_s)
        if request.request_id in self.by_request:
            name = self.by_request[request.request_id]
            if name in self.runs:
                return ts.StartRunResponse(run=self.runs[name].run)
        run = run_pb2.Run(name=f"runs/r{next(self._ids)}", spec=request.spec, job=request.job,
                          state=R.RUN_STATE_PENDING, create_time=_now(), labels=request.labels)
        if request.HasField("resume_from"):
            run.resume_from.CopyFrom(request.resume_from)
        if request.HasField("timeout"):
            run.timeout.CopyFrom(request.timeout)
        if any(r.run.job == request.job for r in self.live()):
            self.overlapping_jobs.add(request.job)
        fake = FakeRun(run)
        if self.node_cpus:
            self._place(run)
        self.runs[run.name] = fake
        self.by_request[request.request_id] = run.name
        self.runs_created[request.request_id] += 1
        self.job_attempts[request.job] += 1
        gpus = sum(r.run.spec.resources_per_worker.num_gpus * (r.run.spec.num_workers or 1) for r in self.live())
        self.max_concurrent_gpu = max(self.max_concurrent_gpu, gpus)
        fake.task = asyncio.create_task(self._play(fake, self.job_attempts[request.job]))
        return ts.StartRunResponse(run=run)

    def _node_free(self) -> list[float]:
        free = list(self.node_cpus)
        for fake in self.live():
            for node in self.placement.get(fake.run.name, []):
                free[node] -= training_spec.cpus(fake.run.spec.resources_per_worker)
        return free

    def _place(self, run: run_pb2.Run) -> None:
        free, nodes = self._node_free(), []
        for _ in range(run.spec.num_workers or 1):
            node = max(range(len(free)), key=lambda i: free[i])
            free[node] -= training_spec.cpus(run.spec.resources_per_worker)
            if free[node] < -1e-9:
                self.overcommitted.add(run.job)
            nodes.append(node)
        self.placement[run.name] = nodes

    async def _play(self, fake: FakeRun, attempt: int) -> None:
        script = json_format.MessageToDict(fake.run.spec.config)
        timeout = fake.run.timeout.ToNanoseconds() / 1e9 if fake.run.HasField("timeout") else None
        try:
            async with asyncio.timeout(timeout):
                await self._script(fake, script, attempt)
        except TimeoutError:
            await fake.set_state(R.RUN_STATE_TIMED_OUT, "ran past its timeout",
                                 common_pb2.Failure(kind=common_pb2.FAILURE_KIND_TIMEOUT, message="ran past its timeout"))

    async def _script(self, fake: FakeRun, script: dict, attempt: int) -> None:
        step_s = float(script.get("step_s", 0.02))
        await fake.set_state(R.RUN_STATE_STARTING)
        await fake.set_state(R.RUN_STATE_RUNNING)
        first = fake.run.resume_from.step + 1 if fake.run.HasField("resume_from") else 1
        steps = int(script.get("steps", 3))
        step = first
        while script.get("hang") or step <= steps:
            await asyncio.sleep(step_s)
            if step == script.get("lose_at_step") and attempt == 1:
                self.runs.pop(fake.run.name)
                async with fake.changed:
                    fake.changed.notify_all()
                return
            if step == script.get("fail_at_step") and attempt <= int(script.get("fail_times", 1)):
                kind = common_pb2.FailureKind.Value(f"FAILURE_KIND_{script.get('fail_kind', 'USER_CODE')}")
                reason = f"rank 0 raised at step {step}"
                await fake.set_state(R.RUN_STATE_FAILED, reason, common_pb2.Failure(kind=kind, rank=0, message=reason))
                return
            report = common_pb2.MetricsReport(step=step, metrics={"loss": 1.0 / step, "step": step})
            fake.run.latest_metrics.CopyFrom(report)
            await fake.emit(metrics=report)
            every = int(script.get("checkpoint_every", 0))
            if every and step % every == 0:
                ckpt = common_pb2.Checkpoint(uri=f"mem://{fake.run.name}/step-{step}", step=step, create_time=_now())
                fake.run.latest_checkpoint.CopyFrom(ckpt)
                await fake.emit(checkpoint=ckpt)
            step += 1
        await fake.set_state(R.RUN_STATE_SUCCEEDED, "all ranks returned")

    async def GetRun(self, request, context):
        fake = self.runs.get(request.name)
        if fake is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        return ts.GetRunResponse(run=fake.run)

    async def StopRun(self, request, context):
        self.stop_calls[request.name] += 1
        fake = self.runs.get(request.name)
        if fake is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        if fake.run.state not in TERMINAL:
            fake.task.cancel()
            await fake.set_state(R.RUN_STATE_STOPPING, request.reason)
            await fake.set_state(R.RUN_STATE_STOPPED, request.reason,
                                 common_pb2.Failure(kind=common_pb2.FAILURE_KIND_STOPPED, message=request.reason))
        return ts.StopRunResponse(run=fake.run)

    async def WatchRun(self, request, context):
        fake = self.runs.get(request.name)
        if fake is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        sent = request.after_sequence
        while True:
            async with fake.changed:
                await fake.changed.wait_for(lambda after=sent: len(fake.events) > after or request.name not in self.runs)
                pending = fake.events[sent:]
            if not pending:
                return  # forgotten (lose_at_step): the stream just ends
            for event in pending:
                sent = event.sequence
                yield ts.WatchRunResponse(event=event)
                if event.WhichOneof("payload") == "state_change" and event.state_change.to_state in TERMINAL:
                    return

    async def GetRunLogs(self, request, context):
        fake = self.runs.get(request.name)
        if fake is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"{request.name} not found")
        world = fake.run.spec.num_workers or 1
        if request.HasField("rank") and not 0 <= request.rank < world:
            # As the real trainer answers.
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"rank: must be between 0 and {world - 1}")
        lines = [common_pb2.LogLine(rank=0, stream=common_pb2.LOG_STREAM_STDOUT, text=f"{fake.run.name} line {i}")
                 for i in range(5)]
        if request.tail_lines:
            lines = lines[-request.tail_lines:]
        yield ts.GetRunLogsResponse(lines=lines)

    async def GetClusterResources(self, request, context):
        held = run_pb2.ResourceAmounts()
        for fake in self.live():
            spec = fake.run.spec
            n = spec.num_workers or 1
            held.num_cpus += training_spec.cpus(spec.resources_per_worker) * n  # unset is 1, as the trainer holds
            held.num_gpus += spec.resources_per_worker.num_gpus * n
            held.memory_bytes += spec.resources_per_worker.memory_bytes * n
        available = run_pb2.ResourceAmounts(
            num_cpus=self.total.num_cpus - held.num_cpus, num_gpus=self.total.num_gpus - held.num_gpus,
            memory_bytes=self.total.memory_bytes - held.memory_bytes,
        )
        nodes = [
            run_pb2.NodeResources(node_id=f"node-{i}", total=run_pb2.ResourceAmounts(num_cpus=cpus),
                                  available=run_pb2.ResourceAmounts(num_cpus=free))
            for i, (cpus, free) in enumerate(zip(self.node_cpus, self._node_free(), strict=True))
        ]
        return ts.GetClusterResourcesResponse(total=self.total, available=available, nodes=nodes)


async def start_fake_trainer(fake: FakeTrainer, port: int = 0) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    trainer_service_pb2_grpc.add_TrainerServiceServicer_to_server(fake, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, f"127.0.0.1:{bound}"
