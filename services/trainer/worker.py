"""WorkerActor: one Ray actor per rank that runs the user's function, one call at a time.

It is not stateless: between calls it keeps what makes it worth keeping warm (Paddle,
once imported, the device set, the collective group it joined, which Paddle lets a process join
only once), and during a call the user-code thread, the queue of reports not yet polled and
the stop flag. The pool hands a whole group to the next run only with the same world size and
environment, so that state is what the next run expects. User code
runs in a thread of its own; the trainer long-polls `next_reports` (reports and, at the end,
the outcome) and may call `request_stop` meanwhile, which is why the actor is threaded.
A user error ends the call with an outcome; a dead process shows up at the trainer as a
RayActorError on the pending `next_reports` instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import re
import socket
import sys
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from paddleray.services.common import ray_private
from paddleray.services.common.call_state import fresh_call
from paddleray.services.common.gpu_env import gpu_process_env, probe_gpu_memory_mb
from paddleray.services.common.ray_connection import start_daemon_thread
from paddleray.services.trainer.backend import math_thread_env
from paddleray.services.trainer.committer import CommitFailed
from paddleray.services.trainer.context import ContextSpec, Report, TrainContext
from paddleray.services.trainer.logs import capture_output
from paddleray.services.trainer.records import MAX_TRACEBACK_CHARS, WorkerInfo

# Ray imports its worker module (this one, the actor's class) before it first deserializes
# anything: from here on Ray's pyarrow/pydantic/starlette serializers wait for those modules.
ray_private.defer_serialization_addons()

# What Ray's runtime_env leaves of a reference to a variable that is not set: nothing.
_UNSET_REFERENCE = re.compile(r"\$\{[A-Z0-9_]+\}")
# The bound of a failure's traceback in the contract (common.v1.Failure.traceback).
_TRACEBACK_CHARS = MAX_TRACEBACK_CHARS
# Reports wait in the actor until the trainer polls them. A rank that reports faster than the
# trainer takes them blocks in ctx.report once this many wait, instead of growing without
# bound (and one poll's reply stays this small).
_MAX_QUEUED_REPORTS = 10_000


@dataclass(frozen=True)
class Outcome:
    """How the user function ended on one rank: ok, or the error and its traceback.

    user_code is False when what failed is the trainer's part (committing a checkpoint the
    function reported), not the function itself."""

    ok: bool
    error: str = ""
    traceback: str = ""
    user_code: bool = True


@dataclass(frozen=True)
class Poll:
    reports: list[Report]
    outcome: Outcome | None  # set once the function returned and every report was handed over


class WorkerActor:
    def __init__(
        self, num_gpus: float = 0.0, has_working_dir: bool = False, env_vars: Mapping[str, str] | None = None
    ) -> None:
        # The run's env vars that the trainer did not give Ray's runtime_env (worker_group.split_env):
        # set first, as if they had been there when the process started.
        apply_env(env_vars or {})
        if num_gpus > 0:
            gpu_ids = ray.get_gpu_ids()
            total = probe_gpu_memory_mb(str(gpu_ids[0])) if num_gpus < 1 and gpu_ids else None
            # Paddle reads FLAGS_* once, when it is imported: set them first.
            os.environ.update(gpu_process_env(num_gpus, gpu_ids, total))
        else:
            # No GPU given, none seen: Ray leaves a GPU-less worker every card of its node, and
            # Paddle (GPU build) would pick one the scheduler never gave out.
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        os.environ.update(math_thread_env(os.environ))
        # Ray starts a worker with a working_dir in that directory (the unpacked package),
        # before any user code could change directory.
        self._working_dir = Path.cwd().resolve()
        # The unpacked package whose modules each call imports anew (call_state.py).
        self._package_dir = self._working_dir if has_working_dir else None
        # Paddle is imported when the worker first needs it: a GPU device, a collective group,
        # or the user's own `import paddle` (a rank that computes on CPU alone needs nothing
        # of Paddle before its code runs). Importing it costs a process about 250 MB and 3-7 s
        # of CPU here: hundreds of small concurrent runs could not start if each paid it
        # up front (bench concurrency). A warm worker keeps it once imported.
        self._device = "cpu"
        if num_gpus > 0:
            self._import_paddle()
        self._reports: queue.Queue = queue.Queue(_MAX_QUEUED_REPORTS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def info(self) -> WorkerInfo:
        """Where this actor runs; the group fills in local_rank, the pool warm."""
        context = ray.get_runtime_context()
        return WorkerInfo(
            node_id=context.get_node_id(),
            node_ip=ray.util.get_node_ip_address(),
            gpu_ids=tuple(str(i) for i in ray.get_gpu_ids()),
            pid=os.getpid(),
        )

    def reserve_endpoint(self) -> str:
        """host:port with a port that is free on this worker's node (for Paddle's rendezvous)."""
        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            return f"{ip}:{s.getsockname()[1]}"

    def set_device(self, device: str) -> None:
        self._device = device
        if device != "cpu" or _imported_paddle() is not None:
            self._import_paddle().set_device(device)

    def join_collective(self, env: dict[str, str], device: str) -> None:
        os.environ.update(env)
        self.set_device(device)
        self._import_paddle().distributed.init_parallel_env()

    def _import_paddle(self) -> Any:
        import paddle

        return paddle

    def start(self, entrypoint: str, spec: ContextSpec, from_package: bool = False) -> None:
        if self._thread is not None:
            # The previous function has handed over its outcome; its thread is finishing.
            self._thread.join(timeout=5)
            if self._thread.is_alive():
                raise RuntimeError("this worker is still running a function")
        self._reports = queue.Queue(_MAX_QUEUED_REPORTS)
        self._stop = threading.Event()
        self._thread = start_daemon_thread(self._run, "user-code", (entrypoint, spec, from_package))

    def next_reports(self, timeout_s: float) -> Poll:
        """Reports since the last call, waiting up to timeout_s for the first one."""
        items = []
        try:
            items.append(self._reports.get(timeout=timeout_s))
            while len(items) < _MAX_QUEUED_REPORTS:  # a rank reporting on meanwhile waits for the next poll
                items.append(self._reports.get_nowait())
        except queue.Empty:
            pass
        reports, outcome = [], None
        for item in items:
            if isinstance(item, Outcome):
                outcome = item
            else:
                reports.append(item)
        return Poll(reports, outcome)

    def request_stop(self) -> None:
        self._stop.set()

    def _hand_over(self, report: Report) -> None:
        # No report waits for the trainer, checkpoints included: a checkpoint is durable on disk
        # before its report is handed over, and its manifest holds the report's step and metrics, so
        # the trainer records it from disk if the process dies before the report is polled
        # (RunRegistry.recover_checkpoint). Waiting for an acknowledgement cost a Ray round
        # trip per checkpoint (5-10 ms an epoch, measured by `python -m bench trainer`).
        self._reports.put(report)

    def _run(self, entrypoint: str, spec: ContextSpec, from_package: bool) -> None:
        mirror = str(spec.paths.logs) if spec.paths.remote else None
        with capture_output(spec.paths.local_logs, spec.rank, mirror):
            outcome = self._call(entrypoint, spec, from_package)
            if not outcome.ok:
                print(outcome.traceback, file=sys.stderr, flush=True)
        self._reports.put(outcome)

    def _call(self, entrypoint: str, spec: ContextSpec, from_package: bool) -> Outcome:
        try:
            with fresh_call(_imported_paddle(), self._package_dir):
                self._call_in_scope(entrypoint, spec, from_package)
        except SystemExit as exc:
            if exc.code in (None, 0):
                return Outcome(ok=True)
            return Outcome(ok=False, error=f"SystemExit: {exc.code}", traceback=_summary(exc))
        except BaseException as exc:  # noqa: BLE001 - any user error fails the run, with its traceback
            return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=_summary(exc),
                           user_code=not isinstance(exc, CommitFailed))
        return Outcome(ok=True)

    def _call_in_scope(self, entrypoint: str, spec: ContextSpec, from_package: bool) -> None:
        # Paddle's expected place is per thread: set it where the user code runs (a Paddle that
        # user code imports in this thread starts on CPU, the device of a worker without GPUs).
        if (paddle := _imported_paddle()) is not None:
            paddle.set_device(self._device)
        module_name, _, function_name = entrypoint.partition(":")
        module = importlib.import_module(module_name)
        if from_package:
            self._check_from_package(module)
        function = getattr(module, function_name)
        context = TrainContext(spec, self._hand_over, self._stop)
        try:
            function(spec.config, context)
        except BaseException:
            # Checkpoints reported before the failure are still committed and handed over
            # (a retry resumes from the newest); the function's error is the run's cause.
            with contextlib.suppress(Exception):
                context.close()
            raise
        context.close()  # a failed commit fails the run here

    def _check_from_package(self, module) -> None:
        """A module allowed as package code must have been loaded from the package: a name the
        zip also has (a stray os.py) must not hand out an installed module."""
        origin = getattr(module, "__file__", None)
        path = Path(origin).resolve() if origin else None
        if path is None or not path.is_relative_to(self._working_dir):
            raise PermissionError(
                f"entrypoint module {module.__name__!r} was loaded from {origin or 'no file'}, not from the "
                f"job's package ({self._working_dir}); only modules of the package or the allowlist may run"
            )


def apply_env(env_vars: Mapping[str, str]) -> None:
    """Sets env vars as Ray's runtime_env does (`${NAME}` expands to the current value, or to
    nothing), and puts a PYTHONPATH's entries on sys.path where the interpreter would have put
    them at start: after the script's directory, in order, ahead of site-packages."""
    for name, value in env_vars.items():
        os.environ[name] = _UNSET_REFERENCE.sub("", os.path.expandvars(value))
    if "PYTHONPATH" in env_vars:
        entries = list(dict.fromkeys(entry for entry in os.environ["PYTHONPATH"].split(os.pathsep) if entry))
        sys.path[1:] = [*entries, *(entry for entry in sys.path[1:] if entry not in entries)]


def _imported_paddle() -> Any | None:
    """Paddle if this process imported it (by the worker or by user code), else None."""
    return sys.modules.get("paddle")


def _summary(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))[-_TRACEBACK_CHARS:]
