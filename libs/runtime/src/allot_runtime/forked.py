"""Work done on a copy-on-write copy of the process (``os.fork``), its answer read back without blocking the loop.

A service exports its snapshot this way (:mod:`allot_runtime.snapshots`): the fork is taken between two batches, so
the child sees the projection exactly as it was then, however the parent changes it afterwards; the parent goes on
deciding while the child encodes. The child:

- turns the cyclic collector off before anything else (a collection would write to the header of every object it
  scans and so copy the whole heap; reference counting still frees what the work drops);
- is killed if the parent dies first (``PR_SET_PDEATHSIG``);
- may run at a lower priority (``nice``): a snapshot taken while the service runs is background work, and on a
  machine with few cores it must not take the CPU from the services deciding;
- touches nothing of the parent's: not its event loop (its signal wake-up descriptor is detached, SIGTERM and SIGINT
  get their default action back), not its connections, not its logging; it only writes to its end of a pipe;
- sends a short header (whether the work succeeded, its small answer or the error, the payload's size, its own
  seconds and peak resident set) and then the payload, and leaves with ``os._exit`` (no ``atexit``, no flushing of
  the parent's buffers).

The parent reads the pipe with the loop's reader callbacks into one buffer of the announced size and reaps the child
without blocking. Cancelling the wait kills the child. Linux only (:data:`AVAILABLE`); elsewhere the caller works in
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import msgspec

AVAILABLE = sys.platform == "linux" and hasattr(os, "fork")
_HEAD = struct.Struct(">I")
_PIPE_SIZE = 1 << 20  # F_SETPIPE_SZ: fewer, larger reads (the default pipe holds 64 KiB)
_F_SETPIPE_SZ = 1031
_PR_SET_PDEATHSIG = 1


class ChildFailed(Exception):
    """The work raised in the child, or the child died before sending everything."""


class Answer(NamedTuple):
    """What the child sent: its small answer, the payload, the seconds the work took and the child's peak resident
    set in bytes."""

    meta: Any
    payload: bytearray
    seconds: float
    peak_rss: int


def _peak_rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _die_with(parent: int) -> None:
    """Be killed when the parent dies (``PR_SET_PDEATHSIG``): a service that crashed and is restarted does not keep
    an orphan encoding a projection nobody will write."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _child(
    work: Callable[[], tuple[Any, Sequence[Any]]], read_fd: int, write_fd: int, parent: int, nice: int
) -> NoReturn:
    code = 1
    try:
        gc.disable()
        _die_with(parent)
        if nice:
            with contextlib.suppress(OSError):
                os.nice(nice)
        os.close(read_fd)
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        started = time.perf_counter()
        try:
            meta, payload = work()
            status = 0
        except BaseException as exc:  # noqa: BLE001 - sent to the parent, which logs it
            meta, payload, status = f"{type(exc).__name__}: {exc}", (), 1
        size = sum(memoryview(part).nbytes for part in payload)
        head = msgspec.msgpack.encode([status, meta, size, time.perf_counter() - started, _peak_rss()])
        _write_all(write_fd, _HEAD.pack(len(head)) + head)
        for part in payload:
            _write_all(write_fd, part)
        os.close(write_fd)
        code = 0
    finally:
        os._exit(code)


class Child:
    """A forked child doing some work; :meth:`answer` waits for what it sends."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.exit: int | None = None  # the child's wait status once reaped
        self._head = bytearray()
        self._meta: list[Any] | None = None
        self._body = bytearray()
        self._filled = 0

    def _feed(self) -> bool:
        """Read what the pipe holds; True at its end."""
        try:
            if self._meta is None:
                chunk = os.read(self.fd, _PIPE_SIZE)
                if not chunk:
                    return True
                self._head += chunk
                self._parse()
                return False
            view = memoryview(self._body)[self._filled :]
            if not view:
                if os.read(self.fd, 1):
                    raise ChildFailed("the child sent more than it announced")
                return True
            with view:
                got = os.readv(self.fd, [view])
            self._filled += got
            return got == 0
        except BlockingIOError:
            return False

    def _parse(self) -> None:
        if len(self._head) < _HEAD.size:
            return
        (size,) = _HEAD.unpack_from(self._head)
        if len(self._head) < _HEAD.size + size:
            return
        meta = msgspec.msgpack.decode(self._head[_HEAD.size : _HEAD.size + size])
        if not isinstance(meta, list) or len(meta) != 5:
            raise ChildFailed("the child sent a malformed header")
        rest = self._head[_HEAD.size + size :]
        self._body = bytearray(int(meta[2]))
        if len(rest) > len(self._body):
            raise ChildFailed("the child sent more than it announced")
        self._body[: len(rest)] = rest
        self._filled = len(rest)
        self._meta = meta
        self._head = bytearray()

    def _reaped(self, *, block: bool = False) -> bool:
        if self.exit is None:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            if pid == 0:
                return False
            self.exit = status
        return True

    async def _exited(self, loop: asyncio.AbstractEventLoop) -> None:
        """Reap the child once it has exited (it closed the pipe just before: unmapping a large copy of the heap
        still takes a moment, which the loop does not wait for), through a pidfd the loop watches."""
        if self._reaped():
            return
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:  # no pidfd (a kernel before 5.3): the child is leaving, wait for it
            self._reaped(block=True)
            return
        gone: asyncio.Future[None] = loop.create_future()

        def exited() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, exited)
        try:
            if not self._reaped():
                await gone
                self._reaped()
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)

    def kill(self) -> None:
        """End the child now, reap it (it holds nothing the parent needs) and close the pipe."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.exit is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                self.exit = os.waitpid(self.pid, 0)[1]

    async def answer(self) -> Answer:
        """Everything the child sent once it has exited; :class:`ChildFailed` when the work raised or the child did
        not send it all. Cancelled, the child is killed."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if ended.done():
                return
            try:
                if self._feed():
                    ended.set_result(None)
            except Exception as exc:  # a malformed stream: the wait fails with it
                ended.set_exception(exc)

        loop.add_reader(self.fd, readable)
        try:
            await ended
            await self._exited(loop)
        except BaseException:
            loop.remove_reader(self.fd)
            self.kill()
            raise
        loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = -1
        meta = self._meta
        if meta is None or self._filled != len(self._body):
            raise ChildFailed(f"the child ended before sending its answer ({_ended(self.exit)})")
        status, answer, _, seconds, peak = meta
        if status != 0:
            raise ChildFailed(str(answer))
        return Answer(answer, self._body, float(seconds), int(peak))


def _ended(status: int | None) -> str:
    if status is None:
        return "still running"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def start(work: Callable[[], tuple[Any, Sequence[Any]]], *, nice: int = 0) -> Child:
    """Fork now; the child runs ``work`` (its small answer, msgpack-able, and a payload: consecutive buffers) on its
    copy of the process and sends both back. The caller's only pause is the fork itself. ``nice``: added to the
    child's niceness, so that background work yields the CPU to the processes deciding."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):
        import fcntl

        fcntl.fcntl(write_fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    parent = os.getpid()
    try:
        pid = os.fork()
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        _child(work, read_fd, write_fd, parent, nice)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return Child(pid, read_fd)
