"""Runs in: a Serve replica.

The transport-agnostic v2 data plane (KServe model-server style): request -> arrays ->
runner -> response, with routing by model_name / model_version and traffic weights.

Nothing here knows about Ray or servers: the gRPC shell (v2_servicer.py) and the REST shell
(v2_rest.py) of every model replica, and the benchmark's bare grpc.aio baseline, are thin
shells around DataPlane, and the tests drive it with in-process runners. Errors are
DomainErrors carrying their status code; an echoed client value is cut to codec.shown's length.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import grpc
import numpy as np

from paddleray.inference.v2 import grpc_service_pb2 as pb
from paddleray.services.common.errors import DomainError, NotFound, Unavailable
from paddleray.services.exporter.serving.artifact import Signature
from paddleray.services.exporter.serving.replica import codec
from paddleray.services.exporter.serving.replica.codec import shown

SERVER_NAME = "paddleray"
SERVER_VERSION = "0.1.0"
# Runner: inputs by name -> outputs by name (all of the version's outputs).
Runner = Callable[[dict[str, np.ndarray]], Awaitable[Mapping[str, np.ndarray]]]
# Observer: (model, version, status code name, seconds) of each inference; "" for unknown ones.
Observer = Callable[[str, str, str, float], None]


class PredictorFailed(DomainError):
    """The model raised on inputs that matched its signature: a server-side failure."""

    code = grpc.StatusCode.INTERNAL


class DeadlineExceeded(DomainError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


@dataclass(frozen=True)
class RoutedVersion:
    version: str
    weight: float
    signature: Signature
    platform: str
    runner: Runner
    # Whether the runner can suspend (a batch queue): only then is it bounded by timeout_s. A runner
    # that calls its predictor and returns cannot be interrupted by asyncio.wait_for anyway, and
    # the Task and timer wait_for makes cost 5% of the digits model's request path in the replica
    # (py-spy under 32 clients, issue 20 point 1).
    suspends: bool = True


@dataclass(frozen=True)
class RoutedModel:
    name: str
    versions: Mapping[str, RoutedVersion]

    def pick(self, version: str, rng: random.Random) -> RoutedVersion:
        """The named version, or one drawn by weight when none is named."""
        if version:
            found = self.versions.get(version)
            if found is None:
                # Only what was asked for: the served versions are not the client's to list here.
                raise NotFound(f"model '{self.name}' has no version '{shown(version)}'")
            return found
        weighted = [v for v in self.versions.values() if v.weight > 0]
        if not weighted:
            raise Unavailable(f"model '{self.name}' has no version taking traffic")
        return rng.choices(weighted, weights=[v.weight for v in weighted])[0]

    def served(self) -> list[str]:
        return sorted(self.versions, key=int)

    def default(self) -> RoutedVersion:
        """The version metadata describes when none is named: the newest taking traffic."""
        weighted = [v for v in self.versions.values() if v.weight > 0] or list(self.versions.values())
        return max(weighted, key=lambda v: int(v.version))


class DataPlane:
    def __init__(
        self, timeout_s: float = 30.0, rng: random.Random | None = None, observe: Observer | None = None,
        not_found_hint: str = "",
    ) -> None:
        """not_found_hint: said after "model 'x' is not served" (where a client should look instead)."""
        self._models: Mapping[str, RoutedModel] = {}
        # Names served elsewhere (the server app's: the installation's models). A call for one
        # reaches this plane only while the model's own replicas do not answer: UNAVAILABLE.
        self.known: frozenset[str] = frozenset()
        self._hint = not_found_hint
        self._ready = False
        self.timeout_s = timeout_s
        self._rng = rng or random.Random()
        self._observe = observe

    def swap(self, models: Mapping[str, RoutedModel]) -> None:
        """Replaces the routing table at once: a request sees the old table or the new one."""
        self._models = dict(models)
        self._ready = True

    @property
    def models(self) -> Mapping[str, RoutedModel]:
        return self._models

    def server_live(self, _: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    def server_ready(self, _: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._ready)

    def server_metadata(self, _: pb.ServerMetadataRequest) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=SERVER_VERSION, extensions=[])

    def model_ready(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        if request.name not in self._models and request.name in self.known:
            return pb.ModelReadyResponse(ready=False)
        model = self._model(request.name)
        if request.version:
            model.pick(request.version, self._rng)
        return pb.ModelReadyResponse(ready=True)

    def model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        model = self._model(request.name)
        version = model.pick(request.version, self._rng) if request.version else model.default()
        response = pb.ModelMetadataResponse(name=model.name, versions=model.served(), platform=version.platform)
        for tensors, specs in ((response.inputs, version.signature.inputs), (response.outputs, version.signature.outputs)):
            for t in specs:
                tensors.add(name=t.name, datatype=t.datatype, shape=t.shape)
        return response

    def route(self, request: pb.ModelInferRequest) -> RoutedVersion:
        return self._model(request.model_name).pick(request.model_version, self._rng)

    async def model_infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        """Every call, unary or streamed, is reported to the observer (model, version, code, seconds)."""
        started = time.perf_counter()
        model, version, code = "", "", "OK"
        try:
            routed = self.route(request)
            model, version = request.model_name, routed.version
            return await self._infer(request, routed)
        except DomainError as exc:
            code = exc.code.name
            raise
        except BaseException:
            code = "INTERNAL"
            raise
        finally:
            if self._observe is not None:
                self._observe(model, version, code, time.perf_counter() - started)

    async def _infer(self, request: pb.ModelInferRequest, routed: RoutedVersion) -> pb.ModelInferResponse:
        inputs = codec.decode_inputs(request, routed.signature)
        names = codec.requested_outputs(request, routed.signature)
        try:
            answer = routed.runner(inputs)
            outputs = await (asyncio.wait_for(answer, self.timeout_s) if routed.suspends else answer)
        except DomainError:
            raise
        except TimeoutError:
            raise DeadlineExceeded(
                f"model '{shown(request.model_name)}' version {routed.version} did not answer within {self.timeout_s:g} s"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any predictor failure becomes one short, clear status
            raise PredictorFailed(
                f"model '{shown(request.model_name)}' version {routed.version} failed: {describe(exc)}"
            ) from None
        missing = [n for n in names if n not in outputs]
        if missing:
            raise PredictorFailed(f"model '{shown(request.model_name)}' version {routed.version} returned no output {missing}")
        return codec.encode_response(request, routed.version, outputs, names)

    async def model_stream_infer(
        self, requests: AsyncIterator[pb.ModelInferRequest]
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """One answer per request, in order; a failed request answers with error_message."""
        async for request in requests:
            try:
                response = await self.model_infer(request)
            except DomainError as exc:
                yield pb.ModelStreamInferResponse(
                    error_message=f"{exc.code.name}: {exc.message}",
                    infer_response=pb.ModelInferResponse(model_name=request.model_name, id=request.id),
                )
                continue
            yield pb.ModelStreamInferResponse(infer_response=response)

    def _model(self, name: str) -> RoutedModel:
        model = self._models.get(name)
        if model is None and name in self.known:
            raise Unavailable(f"model '{shown(name)}' is not answering yet (its replicas are starting): retry")
        if model is None:
            # Only the name asked for: other names are other deployments' (other tenants').
            raise NotFound(f"model '{shown(name)}' is not served{self._hint}")
        return model


def describe(exc: BaseException) -> str:
    """`Type: first line` of the root cause, at most 300 characters (never a whole traceback)."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    # Ray's task errors repeat the traceback in str(); the root cause's own message is the last line.
    text = lines[-1] if lines and "Traceback" in str(cause) else (lines[0] if lines else "")
    return f"{type(cause).__name__}: {text}"[:300]
