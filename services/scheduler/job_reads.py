"""Reading jobs: one job as its caller may see it, a page of them, and the watch of a job's events.

Other components read jobs through `find` / `find_many`, never through the store. JobManager
(jobs.py) is these reads, the transitions of job_transitions.py and the creation path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from paddleray.scheduler.v1 import job_pb2
from paddleray.services.common import errors, identity, names, paging
from paddleray.services.common.cancellation import raise_if_cancelled
from paddleray.services.common.identity import Identity
from paddleray.services.scheduler import tenancy, validation
from paddleray.services.scheduler.job_states import J, is_terminal
from paddleray.services.scheduler.store import JobRecord, JobStore


class JobReads:
    """The reads of JobManager: get, list and watch take the caller and apply the tenant rules
    (another tenant's job is NOT_FOUND, as a missing one); record, find and find_many are the
    service's own."""

    store: JobStore

    async def get(self, name: str, *, caller: Identity) -> job_pb2.Job:
        """The job as caller may see it (tenancy.shown)."""
        return tenancy.shown(caller, await self._visible(name, caller))

    async def _visible(self, name: str, caller: Identity) -> job_pb2.Job:
        """The job, or NOT_FOUND (as for a missing job) when caller may not see its tenant."""
        job = (await self.record(name)).job
        identity.check_visible(caller, job.tenant, name)
        return job

    async def record(self, name: str) -> JobRecord:
        record = await self.store.get(names.JOB.parse_one(name))
        if record is None:
            raise errors.NotFound(f"{name} not found")
        return record

    async def find(self, job_id: str) -> job_pb2.Job | None:
        """The job with this id, or None (no error: callers such as experiments expect gaps)."""
        record = await self.store.get(job_id)
        return record.job if record is not None else None

    async def find_many(self, job_ids: list[str]) -> list[job_pb2.Job | None]:
        """The jobs with these ids in one round trip, None for each one that does not exist."""
        return [r.job if r is not None else None for r in await self.store.get_many(job_ids)]

    async def list(self, page_size: int, page_token: str, states, labels, experiment: str, tenant: str,
                   view: int = job_pb2.JOB_VIEW_UNSPECIFIED, *, caller: Identity):
        """A page of the jobs of `tenant` ('' = all, admins only; identity.list_filter) as caller
        may see them; an empty page when a member asks for another tenant's."""
        narrowed = identity.list_filter(caller, tenant)
        if narrowed is None:
            return [], ""
        tenant = narrowed
        size = paging.page_size(page_size)
        if view not in job_pb2.JobView.values():
            raise errors.InvalidArgument("view", f"unknown job view {view}")
        for i, state in enumerate(states):
            if state not in J.values() or state == J.JOB_STATE_UNSPECIFIED:
                raise errors.InvalidArgument(f"states[{i}]", f"unknown job state {state}")
        validation.validate_labels(labels, "labels")
        if experiment:
            names.EXPERIMENT.parse(experiment, "experiment")
        filters = {"states": list(states), "labels": dict(labels), "experiment": experiment, "tenant": tenant}
        after = paging.decode_page_token(page_token, filters, "ListJobs")
        jobs, last = await self.store.list_jobs(size, after, set(states), dict(labels), experiment, tenant,
                                                without_config=view == job_pb2.JOB_VIEW_BASIC)
        return [tenancy.shown(caller, j) for j in jobs], paging.encode_page_token(last, filters) if last else ""

    async def watch(self, name: str, after_sequence: int, poll_ms: int = 1000, *,
                    caller: Identity) -> AsyncIterator[job_pb2.JobEvent]:
        """Events after after_sequence, then new ones as they happen, until the terminal one."""
        await self._visible(name, caller)
        if after_sequence < 0:
            raise errors.InvalidArgument("after_sequence", "must be >= 0")
        job_id = names.JOB.parse_one(name)
        record = await self.record(name)
        first = await self.store.first_sequence(job_id)
        if after_sequence and first and after_sequence + 1 < first:
            raise errors.OutOfRange(
                f"after_sequence {after_sequence} is older than the kept history (oldest kept: {first})"
            )
        last = after_sequence
        if after_sequence >= record.seq and is_terminal(record.job.state):
            return
        while True:
            raise_if_cancelled()  # redis-py swallows it inside the blocking read
            events = await self.store.events_after(job_id, last, block_ms=poll_ms)
            for event in events:
                last = event.sequence
                yield event
                if event.WhichOneof("payload") == "state_change" and is_terminal(event.state_change.to_state):
                    return
            if not events and await self.store.get(job_id) is None:
                return  # deleted while watched
