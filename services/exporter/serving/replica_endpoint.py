"""A model replica's own v2 endpoint: a grpc.aio server in a thread of the replica.

Why it exists (measured, serving/README.md): through Ray Serve's proxy a request crosses two
Ray hops (proxy -> ingress -> model replica) and costs about 8.6 ms of server CPU, against
about 0.7 ms in a grpc.aio server that owns the predictor. So every replica of a deployment
that has a direct port also serves the v2 API itself, on that port: the replicas of all the
deployment's versions on a node share it (SO_REUSEPORT, the kernel spreads connections over
them), and each answers its own version with its own predictor and forwards the others through
a Serve handle (model_app.py). Serve still places, restarts, scales and replaces the replicas.

The server runs on an event loop of its own, in its own thread: the replica's loop belongs to
Serve, and a request here must not wait behind Serve's work or the other way round.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import grpc

from paddleray.inference.v2 import grpc_service_pb2_grpc

logger = logging.getLogger(__name__)
# As Ray Serve's public proxy (and node_env.py's hops): a tensor the proxy takes is taken here too.
MAX_MESSAGE_BYTES = 2**31 - 1
# How long a drain holds new calls before the server stops (see stop()): at least the first,
# then until no call arrived for two quiet windows in a row, at most the last.
DRAIN_HOLD_S = 0.2
DRAIN_QUIET_S = 0.05
DRAIN_HOLD_MAX_S = 2.0


def reachable_host(host: str) -> str:
    """The address to reach a server bound to `host` on this node (loopback for a wildcard)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


class _Gate(grpc.aio.ServerInterceptor):
    """Holds calls while closed: a held call is already the application's, so stop() waits for it."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.arrivals = 0

    async def intercept_service(self, continuation, handler_call_details):
        self.arrivals += 1
        await self.open.wait()
        return await continuation(handler_call_details)


class ReplicaEndpoint:
    def __init__(self, servicer: grpc_service_pb2_grpc.GRPCInferenceServiceServicer, host: str, port: int,
                 drain_s: float = 5.0, serving_name: str = "") -> None:
        """serving_name: the model it serves; a port where a v2 server that does not serve it
        listens already is refused (SO_REUSEPORT would let the two share its connections)."""
        self.address = f"{host}:{port}"
        self._probe_address = f"{reachable_host(host)}:{port}"
        self._serving_name = serving_name
        self._servicer = servicer
        self._drain_s = drain_s
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._gate: _Gate | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        """Binds and serves; raises RuntimeError when the port cannot be bound, or when another
        v2 server that does not serve this model listens there (another installation's)."""
        if self._serving_name:
            self._refuse_a_foreign_server()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"v2-endpoint-{self.address}", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout_s)
        logger.info("v2 endpoint serving on %s", self.address)

    def _refuse_a_foreign_server(self) -> None:
        from paddleray.inference.v2 import grpc_service_pb2 as pb

        with grpc.insecure_channel(self._probe_address) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            try:
                if stub.ModelReady(pb.ModelReadyRequest(name=self._serving_name), timeout=2.0).ready:
                    return  # this model's other replicas
            except grpc.RpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return  # nothing listens (or a replica stopping): the port is ours to take
        raise RuntimeError(f"the v2 endpoint cannot bind {self.address}: a v2 server that does not serve "
                           f"{self._serving_name!r} listens there (another installation's?)")

    async def _start(self) -> None:
        self._gate = _Gate()  # on this loop: its Event belongs to it
        server = grpc.aio.server(interceptors=[self._gate], options=[
            # Every replica of the deployment on this node listens on the same port.
            ("grpc.so_reuseport", 1),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ])
        grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self._servicer, server)
        try:
            if server.add_insecure_port(self.address) == 0:
                raise RuntimeError(f"cannot bind {self.address}")
        except RuntimeError as exc:
            raise RuntimeError(f"the v2 endpoint cannot bind {self.address}: {exc}") from None
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Stops taking connections, lets calls in flight finish (up to drain_s), then ends.

        The replica is going (replaced or removed): its clients' connections get a GOAWAY and
        reconnect to the port, where the kernel hands them to a replica still listening; a call
        sent before the GOAWAY reached the client is refused unprocessed, and the client retries
        it on the new connection by itself. One catch, measured (32 clients, two servers on one
        port): grpc's shutdown cancels the calls it has received but the server's loop has not
        taken yet (CANCELLED, 16-29 a drain). So new calls are held first, until none has
        arrived for a while (_drain): with the loop idle, it takes every call that arrives, and
        none is left for the shutdown to cancel (0 of ~20,000); then the shutdown starts and
        the held calls go on.
        """
        if self._server is not None and self._gate is not None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                    self._drain(self._server, self._gate), self._loop)), DRAIN_HOLD_MAX_S + self._drain_s + 5)
            except Exception:  # noqa: BLE001 - the replica is going either way
                logger.exception("v2 endpoint %s did not stop cleanly", self.address)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _drain(self, server: grpc.aio.Server, gate: _Gate) -> None:
        gate.open.clear()
        await asyncio.sleep(DRAIN_HOLD_S)
        # A loaded node (the replica runs at Ray's niceness 15) may take longer to take what
        # arrived: go on once calls stop arriving (clients wait on the held ones), or at the cap.
        deadline, quiet = asyncio.get_running_loop().time() + DRAIN_HOLD_MAX_S - DRAIN_HOLD_S, 0
        while quiet < 2 and asyncio.get_running_loop().time() < deadline:
            seen = gate.arrivals
            await asyncio.sleep(DRAIN_QUIET_S)
            quiet = quiet + 1 if gate.arrivals == seen else 0
        stopping = asyncio.ensure_future(server.stop(self._drain_s))
        await asyncio.sleep(0.01)  # the shutdown has begun (GOAWAY sent, nothing more taken) ...
        gate.open.set()  # ... so the held calls can go on
        await stopping
