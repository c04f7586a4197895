"""A TCP proxy for fault tests: forwards connections to a real server until told to stop answering (``freeze``: every
connection stays open and nothing goes through, as a server that hangs or a network that drops packets) or to refuse
(``refuse``: every connection is closed, and each new one is closed as soon as it is made, as a server that is gone;
``refused`` counts those attempts), and again once ``thaw`` is called.

In front of PostgreSQL it can also lose the answer to one COMMIT (``lose_commit_answer``): the server receives the
COMMIT and commits, the client never hears so, as when a connection drops or a network stalls at that moment. It
follows the messages each client sends (:class:`FrontendMessages`) to tell when that is."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FrontendMessages", "LostAnswer", "TcpProxy", "tcp_proxy", "through"]

LostAnswer = Literal["drop", "withhold"]
# the codes of PostgreSQL's requests for an encrypted connection (SSL, GSSAPI)
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104


class FrontendMessages:
    """What a PostgreSQL client sends, split into messages as it goes through: the startup packet (after a request
    for encryption, when the client makes one), then typed messages (a type byte and a length). :meth:`feed` says when
    a COMMIT went by: a simple query ('Q') whose text is COMMIT, which is how asyncpg ends every transaction
    (``Q COMMIT;``). A connection whose bytes stop making sense (one that the server agreed to encrypt) is no longer
    looked into: :attr:`lost`."""

    KEEP = 64  # a query longer than this is no COMMIT: its text is passed over, not kept

    def __init__(self) -> None:
        self.lost = False
        self._startup = True  # messages without a type byte until the startup packet
        self._encrypting = False  # an encryption request sent: the server's first byte says whether it agreed
        self._head = bytearray()
        self._kind = b""
        self._body = bytearray()
        self._left = 0  # bytes of the current message's body still to come
        self._keep = False

    def feed(self, data: bytes) -> bool:
        """Follow ``data`` (the client's next bytes); whether a COMMIT message ended in it."""
        commit, at = False, 0
        while at < len(data) and not self.lost:
            if self._left:
                take = min(self._left, len(data) - at)
                if self._keep:
                    self._body += data[at : at + take]
                self._left -= take
                at += take
                commit = (not self._left and self._ended()) or commit
                continue
            header = 4 if self._startup else 5
            take = min(header - len(self._head), len(data) - at)
            self._head += data[at : at + take]
            at += take
            if len(self._head) < header:
                break
            length = int.from_bytes(self._head[-4:], "big")
            self._kind = bytes(self._head[:-4])
            self._head.clear()
            if length < 4:
                self.lost = True
                break
            self._left = length - 4
            self._keep = self._startup or (self._kind == b"Q" and self._left <= self.KEEP)
            commit = (not self._left and self._ended()) or commit
        return commit

    def server_said(self, data: bytes) -> None:
        """The server's answer to a request for encryption: anything but a refusal ('N') ends the looking."""
        if self._encrypting and data:
            self._encrypting = False
            self.lost = self.lost or data[:1] != b"N"

    def _ended(self) -> bool:
        body = bytes(self._body)
        self._body.clear()
        if self._startup:
            self._encrypting = int.from_bytes(body[:4], "big") in (_SSL_REQUEST, _GSSENC_REQUEST)
            self._startup = self._encrypting
            return False
        return self._kind == b"Q" and body.rstrip(b"\x00").strip().rstrip(b";").strip().upper() == b"COMMIT"


class _Link:
    """One proxied connection: the client's messages, and how the answer to its COMMIT is lost (None: it is not)."""

    def __init__(self) -> None:
        self.frontend = FrontendMessages()
        self.losing: LostAnswer | None = None


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
        self._losing: LostAnswer | None = None
        self.commit_lost = asyncio.Event()  # the answer to the COMMIT of lose_commit_answer was lost

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._flowing.clear()

    def refuse(self) -> None:
        self._refusing = True
        self._close_all()

    def lose_commit_answer(self, how: LostAnswer = "drop") -> None:
        """The next COMMIT any client sends reaches the server, which commits; its answer is lost. ``drop``: the
        client's connection is closed once the answer has come (a connection lost after the commit); ``withhold``:
        it stays open and nothing more comes through it (an answer that never comes: only the client's own timeout
        ends the wait). :attr:`commit_lost` is set when the answer was lost."""
        self._losing = how
        self.commit_lost.clear()

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
            link = _Link()
            try:
                await asyncio.gather(
                    self._requests(reader, up_writer, link), self._answers(up_reader, writer, link)
                )
            finally:
                up_writer.close()
                self._writers.discard(up_writer)
        except OSError:
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        """Client to server. A COMMIT marks its connection as losing the answer (when one is to be lost) before it
        goes on: the answer cannot come back before the mark."""
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if link.frontend.feed(data) and self._losing is not None:
                    link.losing, self._losing = self._losing, None
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        """Server to client, unless the connection's answer to its COMMIT is to be lost."""
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                link.frontend.server_said(data)
                if link.losing is not None:
                    self.commit_lost.set()
                    if link.losing == "drop":
                        break  # the client's side is closed below
                    continue
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
