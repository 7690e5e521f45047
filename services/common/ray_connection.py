"""A Ray driver's connection to its cluster: connect, watch, reconnect after a head restart.

One mechanism for every service that is a Ray driver (the trainer, the exporter). Three facts
of Ray 2.60 shape it (measured on a local head that was stopped and started):
- A Ray API called before `ray.init` auto-initialises with *no* address, which attaches to
  whatever /tmp/ray/ray_current_cluster names (a dead earlier head, someone else's cluster).
  So the configured address is put in RAY_ADDRESS and auto-connect is turned off, and every
  Ray use asks `require()` (or `connected`) first, which answers UNAVAILABLE while not connected.
- While the GCS is down, `ray.init` and GCS calls such as `remove_placement_group` block (for
  up to a minute), and after 60 s without its GCS Ray exits the driver process; a driver whose
  GCS comes back as a *new* cluster is killed at once by Ray's `WrongClusterID` check (a
  fatal C++ check: nothing in Python can catch it). So Ray is only ever waited on in daemon
  threads, never on the event loop, and a lost cluster is let go (`ray.shutdown()`, which
  returns in about 5 s then) well within that minute, before the head is back.
- Which calls wait on the GCS (measured with the GCS killed): `placement_group()` (still waiting
  8 s later), and the first `.remote()` of each `ray.remote(...)` object on each
  connection, which exports the function or actor class to the GCS with no timeout. Submitting
  a task of an exported function, creating an actor of an exported class, `ray.cancel` and
  `ray.kill` are local (1-2 ms). So the services make each remote function and actor class once
  and submit through `in_daemon_thread`: a CI run lost the exporter when its head stopped while an
  export was being submitted on the event loop (nothing answered, not even health, until Ray's
  minute was up).
- A driver survives its head going away: after `ray.shutdown()` the same process can
  `ray.init` the restarted head. Everything of the old cluster is gone (without GCS fault
  tolerance a head restart ends every actor, Serve's included), so the caller's `on_lost`
  ends what ran there (the trainer's runs, the exporter's exports) and, once connected again
  (`generation` grows by one), the caller sets up again what it needs (the exporter
  re-deploys every recorded deployment).

A restarted head is told apart from a short GCS hiccup by a marker written into the GCS's
key-value store at connect time: a new cluster does not have it, or (measured: a head back on
the same address before lost_after_s) refuses the old session with AuthenticationError. The
driver survives that window and takes the new cluster as soon as it answers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from paddleray.services.common import errors, ray_private

log = logging.getLogger(__name__)

# Each connection writes a key of its own (paddleray/<service>-connection/<uuid>): several
# drivers (replicas, a trainer and an exporter, or a test stack beside another) may drive one
# cluster, and a shared key would make each see the others' write as a restart.
_MARKER_NAMESPACE = b"paddleray"
# Calls in flight through in_daemon_thread. A lost cluster's driver is shut down (and a new one
# made) only once they returned or QUIESCE_S passed: a call of the old cluster's must not return
# into a driver made meanwhile (a GCS call with a 10 s timeout, the reconciler's ownership check,
# was seen still in flight across the shutdown).
_IN_FLIGHT: set[threading.Thread] = set()
_IN_FLIGHT_LOCK = threading.Lock()
QUIESCE_S = 10.0


def forbid_addressless_init(address: str) -> None:
    """Makes any implicit `ray.init()` in this process use `address`, or fail.

    Ray reads RAY_ADDRESS when `ray.init()` is given no address, and its auto-init hook
    (which calls `ray.init()` from the first Ray API used) checks `enable_auto_connect`,
    the switch behind RAY_ENABLE_AUTO_CONNECT=0, read once at import (too early to set
    through the environment here).
    """
    os.environ["RAY_ADDRESS"] = address
    os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
    ray_private.disable_auto_connect()


async def in_daemon_thread(fn: Callable[[], Any], on_abandoned: Callable[[Any], None] | None = None) -> Any:
    """Runs a call that may block on Ray's GCS for long; the process can exit meanwhile
    (asyncio.to_thread's executor threads would hold up interpreter exit).

    If the awaiting coroutine is cancelled before the call returns (the cluster was lost while
    it waited), `on_abandoned(result)` runs in a daemon thread of its own once it does: what the
    call made (a placement group, actors, a task) is freed instead of leaking.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            _hand_over(loop, future, None, exc, None)
        else:
            _hand_over(loop, future, result, None, on_abandoned)

    start_daemon_thread(run, "paddleray-ray-call")
    return await future


def start_daemon_thread(target: Callable[..., None], name: str, args: tuple[Any, ...] = ()) -> threading.Thread:
    """Starts `target(*args)` in a daemon thread that is in flight (see calls_returned)
    until it ends: the one way a module that uses Ray starts a thread (a worker's user code, a
    call that waits on the GCS), so none holds up the process's exit and a driver shuts Ray down
    only once they returned (tests/unit/common/test_one_way_to_ray.py checks it)."""
    def run() -> None:
        try:
            target(*args)
        finally:
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT.discard(threading.current_thread())

    thread = threading.Thread(target=run, daemon=True, name=name)
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT.add(thread)
    thread.start()
    return thread


async def calls_returned(timeout_s: float, poll_s: float = 0.05) -> int:
    """Waits up to timeout_s for the threads in flight now to end; how many still run then (a
    function export waits on a dead GCS with no timeout). Polled on the event loop: a thread
    that waited for the others would be in flight itself."""
    deadline = time.monotonic() + timeout_s
    with _IN_FLIGHT_LOCK:
        threads = list(_IN_FLIGHT)
    while (still := sum(t.is_alive() for t in threads)) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
    return still


def _hand_over(loop: asyncio.AbstractEventLoop, future: asyncio.Future, result: Any, exc: BaseException | None,
               on_abandoned: Callable[[Any], None] | None) -> None:
    def settle() -> None:
        if not future.done():
            future.set_exception(exc) if exc is not None else future.set_result(result)
        elif on_abandoned is not None:
            free_in_daemon_thread(on_abandoned, result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop closed meanwhile: nobody awaits the result
        if on_abandoned is not None:
            free_in_daemon_thread(on_abandoned, result)


def free_in_daemon_thread(fn: Callable[[Any], None], arg: Any) -> None:
    """Runs `fn(arg)`, freeing what a Ray call made (cancel a task, remove a placement group), in a
    daemon thread that is in flight like a call; failures are logged (the cluster may be gone)."""
    def run() -> None:
        try:
            fn(arg)
        except Exception as exc:  # noqa: BLE001 - best effort: the cluster may be gone too
            log.warning("could not free what an abandoned Ray call made: %r", exc)

    start_daemon_thread(run, "paddleray-ray-cleanup")  # it calls Ray too: in flight like the call


class RayConnection:
    """`service` names the driver in its GCS marker and logs ("trainer", "exporter")."""

    def __init__(
        self,
        address: str,
        namespace: str,
        service: str,
        probe_interval_s: float = 1.0,
        lost_after_s: float = 10.0,
        retry_interval_s: float = 2.0,
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.service = service
        self.probe_interval_s = probe_interval_s
        self.lost_after_s = lost_after_s
        self.retry_interval_s = retry_interval_s
        self._connected = False
        self._owned = False
        self._marker = b""
        self._problem = "not connected yet"
        self.reconnects = 0
        # Connections made so far (adopted included): a caller that sets up state on the cluster
        # (Serve apps) does it again when this changes.
        self.generation = 0

    @property
    def connected(self) -> bool:
        return self._connected

    def require(self) -> None:
        """Raises UNAVAILABLE unless Ray calls can be made now."""
        if not self._connected:
            raise errors.Unavailable(f"the Ray cluster at {self.address} cannot be reached ({self._problem})")

    def adopt(self) -> None:
        """Uses a connection this process made elsewhere (tests drive Ray from the test
        process): it is not watched, reconnected or shut down from here."""
        self.generation += 1
        self._set(True)

    def adopt_existing(self) -> bool:
        """Adopts this process's Ray connection when it has one not made here; True if it did."""
        if ray.is_initialized() and not self._owned:
            self.adopt()
            return True
        return False

    async def run(self, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """connect(), then watch(on_lost): the whole life of the connection, as a task."""
        await self.connect()
        await self.watch(on_lost)

    async def connect(self) -> None:
        """Returns once connected to the configured address, trying again until then."""
        if self.adopt_existing():
            return
        forbid_addressless_init(self.address)
        attempt = 0
        while True:
            attempt += 1
            try:
                # ray.init waits minutes for a GCS that is not there; a closed port is cheap to see.
                if not await in_daemon_thread(self._gcs_port_open):
                    raise _GcsClosed("the GCS port is closed")
                self._marker = await in_daemon_thread(self._init)
                break
            except Exception as exc:  # noqa: BLE001 - any failure to connect is retried
                # ray.init hides why behind "Failed to connect to Ray cluster": say the cause too.
                cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
                self._problem = f"connect failed: {type(exc).__name__}: {exc}{cause}"[:500]
                closed = isinstance(exc, _GcsClosed)
                if attempt == 1 or not closed:
                    log.warning("cannot connect to Ray at %s yet (%s); retrying", self.address, self._problem)
                if not closed:  # a failed ray.init may leave a half-made driver behind
                    await in_daemon_thread(_shutdown_quietly)
                await asyncio.sleep(self.retry_interval_s)
        self._owned = True
        self.generation += 1
        log.info("%s connected to Ray at %s after %d attempt(s)", self.service, self.address, attempt)
        self._set(True)

    async def watch(self, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """Probes the cluster; reconnects when it is lost, after `on_lost(reason)`.

        `on_lost` runs while `connected` is already False, and must not call Ray (its GCS is
        gone): it ends what ran on the cluster, then the driver is shut down and reconnected.
        """
        if not self._owned:
            return
        failing_since: float | None = None
        while True:
            await asyncio.sleep(self.probe_interval_s)
            state = await in_daemon_thread(self._probe)
            if state == "alive":
                if failing_since is not None:
                    log.info("Ray at %s answers again", self.address)
                failing_since = None
                self._set(True)
                continue
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
                log.warning("Ray at %s does not answer (%s)", self.address, state)
            self._problem = state
            self._set(False)
            if state == "restarted" or now - failing_since >= self.lost_after_s:
                reason = f"the Ray cluster at {self.address} was lost ({state})"
                log.warning("%s; reconnecting", reason)
                try:
                    await on_lost(reason)
                except Exception:  # noqa: BLE001 - the driver must be let go of within Ray's minute
                    log.exception("on_lost failed")
                await _shut_down_after_calls("the lost cluster")
                self.reconnects += 1
                await self.connect()
                failing_since = None

    async def close(self) -> None:
        if self._owned:
            self._owned = False
            self._set(False)
            await _shut_down_after_calls("the cluster")

    def _set(self, connected: bool) -> None:
        self._connected = connected

    def _gcs_port_open(self) -> bool:
        """False when the address is a GCS host:port that refuses connections; True otherwise
        (other address forms, such as 'auto' or 'ray://', are left to ray.init)."""
        host, sep, port = self.address.rpartition(":")
        if not sep or not port.isdigit() or "/" in host:
            return True
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return True
        except OSError:
            return False

    def _init(self) -> bytes:
        forget_serve_client()
        ray.init(address=self.address, namespace=self.namespace, log_to_driver=False)
        marker = f"paddleray/{self.service}-connection/{uuid.uuid4().hex}".encode()
        _gcs().internal_kv_put(marker, b"1", True, _MARKER_NAMESPACE, timeout=10)
        return marker

    def _probe(self) -> str:
        """'alive', 'restarted' (a new cluster: the marker is gone, or the GCS refuses this
        driver's session) or why it did not answer."""
        try:
            found = _gcs().internal_kv_get(self._marker, _MARKER_NAMESPACE, timeout=max(self.probe_interval_s, 1.0))
        except ray.exceptions.AuthenticationError:
            # Measured: a head restarted on the same address (same token) answers the old
            # session's probes with AuthenticationError, never with a missing marker, so without
            # this the driver waited out lost_after_s with the new cluster already up. The
            # deploy manifests run the GCS without fault tolerance: a new GCS is a new cluster.
            return "restarted"
        except Exception as exc:  # noqa: BLE001 - any failure means no answer
            return f"the GCS does not answer: {type(exc).__name__}"
        if found is None:
            return "restarted"
        return "alive"


def forget_serve_client() -> None:
    """Drops the Serve controller client a previous connection of this process cached.

    Serve reuses its cached client while the driver's job id is the one that cached it, and job
    ids count from 01000000 on every new cluster: the exporter, the first driver of a restarted
    head, got the same job id again, and Serve called the old cluster's controller through a
    stale actor handle in the new driver ("Can't find actor ... from a different cluster").
    About one head restart in fifteen, the exporter then died of SIGSEGV in
    CoreWorkerMemoryStore::Get (stack printed in the log, CI and local). Dropped before every
    ray.init, Serve finds the controller by name on the cluster it is connected to.
    """
    ray_private.forget_serve_client()


class _GcsClosed(ConnectionError):
    """Nothing listens on the GCS port yet (ray.init was not tried)."""


def _gcs():
    return ray_private.gcs_client()


async def _shut_down_after_calls(what: str) -> None:
    """ray.shutdown() once the calls in flight returned, or QUIESCE_S passed: a call that returns
    after the shutdown must not land in a driver made meanwhile, nor in none (a GCS call of a
    dead cluster may never return: abandoned after the bound, in its daemon thread)."""
    if still := await calls_returned(QUIESCE_S):
        log.warning("%d Ray call(s) still wait on %s; shutting its driver down anyway", still, what)
    await in_daemon_thread(_shutdown_quietly)


def _shutdown_quietly() -> None:
    try:
        ray.shutdown()
    except Exception as exc:  # noqa: BLE001 - a half-dead driver may fail to shut down cleanly
        log.warning("ray.shutdown after losing the cluster: %s", exc)
