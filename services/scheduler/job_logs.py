"""A job's logs: which attempt's trainer run to read, then the run's lines from the trainer.

GetJobLogs is a proxy: the scheduler keeps no logs, the trainer does (per run). This picks the
attempt (0 means the newest), checks the request, and maps the trainer's answers to the
errors a job's client expects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from grpc import aio

from paddleray.common.v1 import common_pb2
from paddleray.services.common import errors
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler.jobs import JobManager
from paddleray.services.scheduler.trainer_client import TrainerClient
from paddleray.trainer.v1 import trainer_service_pb2 as ts


class JobLogs:
    def __init__(self, manager: JobManager, trainer: TrainerClient | None) -> None:
        self._manager = manager
        self._trainer = trainer

    async def stream(self, name: str, attempt: int = 0, rank: int | None = None, tail_lines: int = 0,
                     follow: bool = False, *, caller: Identity) -> AsyncIterator[list[common_pb2.LogLine]]:
        """The attempt's log lines in batches, as the trainer sends them; NOT_FOUND (as for a
        missing job) when caller may not see the job's tenant (JobManager.get)."""
        job = await self._manager.get(name, caller=caller)
        if attempt < 0:
            raise errors.InvalidArgument("attempt", "must be >= 0 (0 means the newest)")
        if tail_lines < 0:
            raise errors.InvalidArgument("tail_lines", "must be >= 0")
        if not job.attempts or not job.attempts[-1].run:
            raise errors.FailedPrecondition(f"{job.name} has not started yet")
        if attempt > len(job.attempts):
            raise errors.NotFound(f"{job.name} has no attempt {attempt}")
        run = job.attempts[attempt - 1 if attempt else -1].run
        if not run or self._trainer is None:
            raise errors.FailedPrecondition(f"attempt {attempt} of {job.name} has no trainer run")
        request = ts.GetRunLogsRequest(name=run, tail_lines=tail_lines, follow=follow)
        if rank is not None:
            request.rank = rank
        try:
            async for response in self._trainer.run_logs(request):
                yield list(response.lines)
        except aio.AioRpcError as exc:
            raise _as_job_error(exc, run) from exc


def _as_job_error(exc: aio.AioRpcError, run: str) -> errors.DomainError:
    """The trainer's answer as the job's client should see it: a refusal of the request stays
    what it is (the trainer checks rank and the like), only an outage is UNAVAILABLE."""
    code = exc.code()
    if code == grpc.StatusCode.NOT_FOUND:
        return errors.NotFound(f"the trainer no longer has the logs of {run}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return _Passed(code, exc.details() or "invalid argument")
    if code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE):
        return _Passed(code, exc.details() or code.name)
    return errors.Unavailable(f"the trainer could not be reached: {code.name}")


class _Passed(errors.DomainError):
    """A trainer status passed through unchanged, with the trainer's message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
