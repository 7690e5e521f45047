"""A TCP proxy in front of a real server, for faults a process kill cannot time exactly: a
reply lost after the server acted on its request, a server that refuses connections."""

from __future__ import annotations

import asyncio
import threading

from support import free_port


class TcpProxy:
    """Listens on 127.0.0.1:port and forwards to target_port, on a loop thread of its own.

    swallow_replies(): the server's bytes stop reaching clients (requests still reach the
    server). cut(): every open connection is closed. refuse(): new connections are closed at
    once, until restore()."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._swallow = False
        self._refuse = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._serve, "127.0.0.1", self.port))

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refuse:
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream_writer}

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, replies: bool) -> None:
            try:
                while data := await source.read(65536):
                    if not (replies and self._swallow):
                        sink.write(data)
                        await sink.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                for w in (writer, upstream_writer):
                    w.close()
                    self._writers.discard(w)

        await asyncio.gather(pump(reader, upstream_writer, False), pump(upstream_reader, writer, True))

    def swallow_replies(self) -> None:
        self._swallow = True

    def refuse(self) -> None:
        self._refuse = True

    def cut(self) -> None:
        async def close_all() -> None:
            for w in list(self._writers):
                w.close()
            self._writers.clear()

        self._call(close_all())

    def restore(self) -> None:
        self._swallow = self._refuse = False

    def close(self) -> None:
        self.cut()
        self._server.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
