"""Test support: in-process gRPC servers on their own event loop, for synchronous tests.

Redis and Ray processes come from paddleray.services.localstack, the same code the local
stack runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from paddleray.services.localstack.ports import free_port, wait_until  # noqa: F401 - re-exported for tests
from paddleray.services.localstack.ray_head import RayHead  # noqa: F401
from paddleray.services.localstack.redis_process import RedisProcess  # noqa: F401


class ServerThread:
    """Runs a paddleray gRPC server on its own event loop in a thread.

    The servicers' async code runs on that loop; tests talk to it over real channels.
    """

    def __init__(self, settings, services: Sequence) -> None:
        from paddleray.services.common.server import start_server

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.server = self.run(start_server(settings, services))
        self.port = self.server.port
        self.address = f"127.0.0.1:{self.port}"

    def run(self, coro, timeout: float = 60):
        """Runs a coroutine on the server's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self, grace: float = 0.5) -> None:
        from paddleray.services.common.server import stop_server

        self.run(stop_server(self.server, grace))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
