"""paddleray's Python SDK: typed calls over the generated stubs, waits, resuming streams.

    from paddleray.services.client import Client

    with Client.connect() as client:              # settings: see config.py
        job = client.create_job(spec_job)
        done = client.wait_job(job.name)          # follows WatchJob, resumes after a drop
        for line in client.job_logs(job.name):
            print(line.rank, line.text)
        version = client.exporter.wait_model_version(client.exporter.export_model("digits", job=job.name).name)
        client.exporter.create_deployment("digits", new_deployment("digits", {1: 100}))
        outputs = client.inference("digits").predict("digits", {"x": rows}).outputs

Every method raises a ClientError: ServiceError (the service said no), Unreachable (no answer
after retries), WaitTimeout (a wait gave up; the job keeps running).
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

import grpc

from paddleray.common.v1 import common_pb2
from paddleray.scheduler.v1 import (
    experiment_pb2,
    experiment_service_pb2,
    experiment_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
)
from paddleray.services.client import channel, config, packaging
from paddleray.services.client.errors import SpecError, Unreachable, WaitTimeout, translate
from paddleray.services.client.exporter import Exporter
from paddleray.services.client.inference import Inference
from paddleray.services.client.streams import LogCursor, Reconnect, resuming
from paddleray.services.common import states

J = job_pb2.JobState
TERMINAL_JOB_STATES = states.JOB_TERMINAL
TERMINAL_EXPERIMENT_STATES = states.EXPERIMENT_TERMINAL


def job_name(name_or_id: str) -> str:
    """"jobs/x" for "x" or "jobs/x": people paste ids without the collection."""
    return name_or_id if name_or_id.startswith("jobs/") else f"jobs/{name_or_id}"


def experiment_name(name_or_id: str) -> str:
    return name_or_id if name_or_id.startswith("experiments/") else f"experiments/{name_or_id}"


class Client:
    """One connection to a paddleray deployment (scheduler; exporter and inference on demand)."""

    def __init__(self, settings: config.ConnectionConfig, timeout: float = 30.0, reconnect: Reconnect | None = None) -> None:
        self.settings = settings
        # Deadline of each unary call, gRPC's own retries included.
        self.timeout = timeout
        self.reconnect = reconnect or Reconnect()
        self._scheduler = channel.open_channel(settings.address, settings)
        self.jobs = job_service_pb2_grpc.JobServiceStub(self._scheduler)
        self.experiments = experiment_service_pb2_grpc.ExperimentServiceStub(self._scheduler)
        self._channels: list[grpc.Channel] = [self._scheduler]

    @classmethod
    def connect(cls, timeout: float = 30.0, **settings) -> Client:
        """A client with settings resolved from arguments, environment, config file, local stack."""
        return cls(config.resolve(**settings), timeout=timeout)

    def open(self, address: str) -> grpc.Channel:
        """A channel to another endpoint with this client's TLS, token and retry policy."""
        opened = channel.open_channel(address, self.settings)
        self._channels.append(opened)
        return opened

    @functools.cached_property
    def exporter(self) -> Exporter:
        """Models, versions and deployments, at the settings' exporter address."""
        return Exporter(self)

    def inference(self, model: str = "", address: str = "") -> Inference:
        """The v2 inference endpoint: address, else the inference_address setting, else the
        endpoint of the deployment that serves model (its serving_name), as the exporter reports it."""
        address = address or self.settings.inference_address
        if not address and model:
            address = self.exporter.serving_endpoint(model)
        return Inference(self, address)

    def close(self) -> None:
        for opened in self._channels:
            opened.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method, request, address: str | None = None, timeout: float | None = None):
        """One unary call with the client's deadline; gRPC errors become ClientErrors."""
        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as error:
            raise translate(error, address or self.settings.address, self.settings.source) from None

    # Code ------------------------------------------------------------------------------------

    def ship_directory(self, directory: str | os.PathLike) -> str:
        """Uploads a local project directory as a package (once per content: packages are
        content-addressed) and returns its URI, `paddleray://packages/sha256-...`."""
        try:
            return packaging.upload_package(self._scheduler, directory, timeout=max(self.timeout, 300.0))
        except packaging.PackageError as error:
            raise SpecError(f"working_dir: {error}") from None
        except grpc.RpcError as error:
            raise translate(error, self.settings.address, self.settings.source) from None

    def ship_code(self, job: job_pb2.Job) -> job_pb2.Job:
        """Uploads a job's local working_dir (ship_directory) and returns a copy of the job that
        names the package URI instead; a URI or an empty working_dir is left alone."""
        working_dir = job.spec.runtime_env.working_dir
        if not working_dir or "://" in working_dir:
            return job
        uri = self.ship_directory(working_dir)
        shipped = job_pb2.Job()
        shipped.CopyFrom(job)
        shipped.spec.runtime_env.working_dir = uri
        return shipped

    # Jobs ------------------------------------------------------------------------------------

    def create_job(self, job: job_pb2.Job, job_id: str = "", request_id: str | None = None) -> job_pb2.Job:
        """Queues a job; a local working_dir is shipped first (ship_code)."""
        job = self.ship_code(job)
        request = job_service_pb2.CreateJobRequest(job=job, job_id=job_id, request_id=request_id or uuid.uuid4().hex)
        return self.call(self.jobs.CreateJob, request).job

    def get_job(self, name: str) -> job_pb2.Job:
        return self.call(self.jobs.GetJob, job_service_pb2.GetJobRequest(name=job_name(name))).job

    def list_jobs_page(
        self, page_size: int = 100, page_token: str = "", states: Sequence[job_pb2.JobState | str] = (),
        labels: dict | None = None,
        experiment: str = "", tenant: str = "",
    ) -> tuple[list[job_pb2.Job], str]:
        request = job_service_pb2.ListJobsRequest(
            page_size=page_size, page_token=page_token, states=states, labels=labels or {},
            experiment=experiment_name(experiment) if experiment else "", tenant=tenant,
        )
        response = self.call(self.jobs.ListJobs, request)
        return list(response.jobs), response.next_page_token

    def list_jobs(self, limit: int | None = None, page_size: int = 100, **filters) -> Iterator[job_pb2.Job]:
        """Jobs newest first, across pages, at most limit of them."""
        token, count = "", 0
        while True:
            page_size_now = min(page_size, limit - count) if limit is not None else page_size
            jobs, token = self.list_jobs_page(page_size=page_size_now, page_token=token, **filters)
            for job in jobs:
                yield job
                count += 1
            if not token or (limit is not None and count >= limit):
                return

    def cancel_job(self, name: str, reason: str = "") -> job_pb2.Job:
        return self.call(self.jobs.CancelJob, job_service_pb2.CancelJobRequest(name=job_name(name), reason=reason)).job

    def delete_job(self, name: str) -> None:
        self.call(self.jobs.DeleteJob, job_service_pb2.DeleteJobRequest(name=job_name(name)))

    def watch_job(self, name: str, after_sequence: int = 0, timeout: float | None = None) -> Iterator[job_pb2.JobEvent]:
        """The job's events after after_sequence until its terminal state change, each once,
        in order, across dropped streams and scheduler restarts; WaitTimeout after timeout s."""
        name = job_name(name)
        last = after_sequence
        deadline = None if timeout is None else time.monotonic() + timeout

        def open_stream():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WaitTimeout(f"{name} is still running after {timeout:g}s")
            return self.jobs.WatchJob(job_service_pb2.WatchJobRequest(name=name, after_sequence=last), timeout=remaining)

        def fresh(response) -> bool:
            nonlocal last
            if response.event.sequence <= last:
                return False
            last = response.event.sequence
            return True

        try:
            for response in resuming(open_stream, self.settings.address, self.reconnect, fresh):
                yield response.event
        except Unreachable:
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{name} is still running after {timeout:g}s") from None
            raise

    def wait_job(
        self, name: str, timeout: float | None = None, on_event: Callable[[job_pb2.JobEvent], None] | None = None,
    ) -> job_pb2.Job:
        """Follows the job until it is terminal and returns it; WaitTimeout after timeout seconds."""
        name = job_name(name)
        for event in self.watch_job(name, timeout=timeout):
            if on_event is not None:
                on_event(event)
        job = self.get_job(name)
        if job.state not in TERMINAL_JOB_STATES:
            # The stream ends only after the terminal event; a deleted job ends it early.
            raise WaitTimeout(f"{name}: watch ended in state {J.Name(job.state)}")
        return job

    def job_logs(
        self, name: str, follow: bool = False, tail_lines: int = 0, rank: int | None = None, attempt: int = 0,
    ) -> Iterator[common_pb2.LogLine]:
        """The worker log lines of one attempt (the newest by default), resumed after a drop."""
        name = job_name(name)
        if attempt == 0:
            attempts = self.get_job(name).attempts
            attempt = attempts[-1].number if attempts else 0
        cursor = LogCursor()
        opened = 0

        def open_stream():
            nonlocal opened
            request = job_service_pb2.GetJobLogsRequest(
                name=name, attempt=attempt, follow=follow, tail_lines=tail_lines if opened == 0 else 0,
            )
            if rank is not None:
                request.rank = rank
            if opened:
                cursor.reopen()
            opened += 1
            return (line for response in self.jobs.GetJobLogs(request) for line in response.lines)

        yield from resuming(open_stream, self.settings.address, self.reconnect, cursor.fresh)

    # Experiments -----------------------------------------------------------------------------

    def create_experiment(self, experiment: experiment_pb2.Experiment, experiment_id: str = "",
                          request_id: str | None = None) -> experiment_pb2.Experiment:
        """Starts a sweep; a local working_dir of its trial template is shipped first (ship_code)."""
        template = self.ship_code(experiment.trial_template)
        if template is not experiment.trial_template:
            shipped = experiment_pb2.Experiment()
            shipped.CopyFrom(experiment)
            shipped.trial_template.CopyFrom(template)
            experiment = shipped
        request = experiment_service_pb2.CreateExperimentRequest(
            experiment=experiment, experiment_id=experiment_id, request_id=request_id or uuid.uuid4().hex,
        )
        return self.call(self.experiments.CreateExperiment, request).experiment

    def get_experiment(self, name: str) -> experiment_pb2.Experiment:
        request = experiment_service_pb2.GetExperimentRequest(name=experiment_name(name))
        return self.call(self.experiments.GetExperiment, request).experiment

    def list_experiments(self, limit: int | None = None, page_size: int = 100,
                         states: Sequence[experiment_pb2.ExperimentState | str] = ()) -> Iterator[experiment_pb2.Experiment]:
        token, count = "", 0
        while True:
            size = min(page_size, limit - count) if limit is not None else page_size
            request = experiment_service_pb2.ListExperimentsRequest(page_size=size, page_token=token, states=states)
            response = self.call(self.experiments.ListExperiments, request)
            for experiment in response.experiments:
                yield experiment
                count += 1
            token = response.next_page_token
            if not token or (limit is not None and count >= limit):
                return

    def cancel_experiment(self, name: str, reason: str = "") -> experiment_pb2.Experiment:
        request = experiment_service_pb2.CancelExperimentRequest(name=experiment_name(name), reason=reason)
        return self.call(self.experiments.CancelExperiment, request).experiment

    def trials(self, name: str) -> list[job_pb2.Job]:
        return list(self.list_jobs(experiment=experiment_name(name)))

    def wait_experiment(
        self, name: str, timeout: float | None = None, poll_interval_s: float = 1.0,
        on_update: Callable[[experiment_pb2.Experiment], None] | None = None,
    ) -> experiment_pb2.Experiment:
        """Polls the experiment (it has no watch RPC) until it is terminal; WaitTimeout after timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        name = experiment_name(name)
        last = None
        while True:
            current = self._get_experiment_retrying(name)
            if on_update is not None and current != last:
                on_update(current)
            last = current
            if current.state in TERMINAL_EXPERIMENT_STATES:
                return current
            if deadline is not None and time.monotonic() + poll_interval_s > deadline:
                raise WaitTimeout(f"{name} is still running after {timeout:g}s")
            time.sleep(poll_interval_s)

    def _get_experiment_retrying(self, name: str) -> experiment_pb2.Experiment:
        request = experiment_service_pb2.GetExperimentRequest(name=name)
        responses = resuming(
            lambda: [self.experiments.GetExperiment(request, timeout=self.timeout)], self.settings.address, self.reconnect,
        )
        return next(iter(responses)).experiment

