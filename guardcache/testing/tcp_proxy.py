"""A TCP proxy on 127.0.0.1 that holds each new connection a while before it carries bytes: a slow
connection set-up (a TLS handshake across zones, a congested network) in front of a real server.

    async with SlowConnectProxy(("127.0.0.1", redis_port), delay=0.08) as proxy:
        proxy.url          # redis://127.0.0.1:<proxy port>/0
        proxy.accepted     # connections accepted so far

The client's TCP connect completes at once (the kernel accepts it); what it sends waits in the socket
until ``delay`` has passed and the proxy has connected upstream, then bytes flow both ways unchanged.
Every read is bounded (``idle_timeout`` without a byte closes the pair) and closing the proxy closes
every connection it carries. It runs in the event loop that starts it: a test's loop, while the
clients are other processes or tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class SlowConnectProxy:
    """``async with SlowConnectProxy(upstream, delay=0.08) as proxy:``; see the module doc."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        delay: float = 0.08,
        idle_timeout: float = 120.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.upstream = upstream
        self.delay = delay
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        """A Redis URL through the proxy (database 0)."""
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> SlowConnectProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(client_writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            await asyncio.sleep(self.delay)  # the slow set-up: nothing is carried meanwhile
            host, port = self.upstream
            upstream_reader, upstream = await asyncio.wait_for(
                asyncio.open_connection(host, port), self.connect_timeout
            )
            upstream_writer = upstream
            self._writers.add(upstream)
            pipes = [
                asyncio.create_task(self._pipe(client_reader, upstream)),
                asyncio.create_task(self._pipe(upstream_reader, client_writer)),
            ]
            try:  # both ways until both ends are done, or one way fails (then the pair is closed)
                await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        except (OSError, TimeoutError):
            pass  # upstream refused or did not answer: the client's connection is closed below
        finally:
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    self._writers.discard(writer)
                    writer.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await asyncio.wait_for(reader.read(65536), self.idle_timeout)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()  # pass the half-close on, as a plain TCP path would

    async def aclose(self) -> None:
        """Stop accepting and close every connection carried."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> SlowConnectProxy:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["SlowConnectProxy"]
