"""A TCP proxy for fault tests: forwards connections to a real server until told to stop answering (``freeze``: every
connection stays open and nothing goes through, as a server that hangs or a network that drops packets) or to refuse
(``refuse``: every connection is closed, and each new one is closed as soon as it is made, as a server that is gone;
``refused`` counts those attempts), and again once ``thaw`` is called."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

__all__ = ["TcpProxy", "tcp_proxy", "through"]


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_host:target_port`` (the port is chosen by :meth:`start`)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.refused = 0  # connections closed at once while refusing
        self._refusing = False
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._flowing.clear()

    def refuse(self) -> None:
        self._refusing = True
        self._close_all()

    def thaw(self) -> None:
        self._refusing = False
        self._flowing.set()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()

    async def stop(self) -> None:
        """Close every connection and stop listening."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.thaw()
        self._close_all()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            if self._refusing:
                self.refused += 1
                return
            await self._flowing.wait()
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.add(up_writer)
            try:
                await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
            finally:
                up_writer.close()
                self._writers.discard(up_writer)
        except OSError:
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def tcp_proxy(target_host: str, target_port: int) -> AsyncIterator[TcpProxy]:
    """A :class:`TcpProxy` to the target for as long as the block runs."""
    proxy = TcpProxy(target_host, target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def through(url: str, proxy: TcpProxy) -> str:
    """``url`` (a server's URL, with or without ``user@``) pointing at ``proxy`` instead of its server."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))
