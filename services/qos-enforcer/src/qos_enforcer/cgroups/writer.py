"""Apply a plan of cgroup writes and verify each by reading it back; find drift for a periodic reconcile.

Rules, per :class:`~qos_enforcer.cgroups.knobs.Write`:

- The path must be relative, free of ``..``, and equal to or below the allowed base (a relative cgroup directory
  such as ``kubepods`` or ``kubepods.slice``); once resolved under the controller's root, the real path (symlinks
  followed) must still be below the base's real path. Anything else is refused and nothing is written.
- The cgroup directory must already exist (the kubelet and the runtime create cgroups; this writer never does),
  and so must the knob file: a missing file means the kernel lacks the controller or feature, or on v2 that the
  controller is not enabled in the parent's ``cgroup.subtree_control``. Files are opened without ``O_CREAT``.
- A value already in place (compared with :func:`~qos_enforcer.cgroups.knobs.same`) is not written again, so
  applying a plan twice is a no-op; otherwise the value is written in one ``write(2)`` and read back, and a
  read-back the kernel normalised differently (``0-3`` for ``0,1,2,3``, page-rounded bytes) still counts as
  applied, while any other difference is reported as a mismatch.
- Every write yields one :class:`Applied`; a refusal, an ``OSError`` (``EINVAL`` for a value the kernel rejects)
  or a mismatch is ``ok=False`` with an error naming the file and the reason. Later writes are still attempted.
"""

from __future__ import annotations

import errno
import mmap
import os
import posixpath
from collections.abc import Sequence
from typing import Protocol

import msgspec

from qos_enforcer.cgroups.knobs import Write, same
from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout
from qos_enforcer.cgroups.paths import absolute_dir, controller_of


class Applied(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of one write: ``readback`` is what the kernel reported afterwards (empty when unread), ``found``
    what the file held before (empty when unread). ``outcome``: ``applied``, ``unchanged``, ``refused`` (outside the
    allowed base), ``missing`` (no such cgroup), ``unsupported`` (no such knob file: the kernel lacks it or the
    controller is not enabled), ``rejected`` (the kernel refused the value), ``mismatch`` or ``failed``."""

    write: Write
    ok: bool
    readback: str = ""
    error: str = ""
    outcome: str = ""
    found: str = ""


class Refused(CgroupError):
    """A path outside the allowed base: nothing is looked up or written."""


class Missing(CgroupError):
    """The cgroup directory does not exist (the kubelet has not created it, or the pod is gone)."""


class Unsupported(CgroupError):
    """The knob file does not exist: the kernel lacks the controller or feature, or it is not enabled here."""


class CgroupFiles(Protocol):
    """How knob files are read and written (the kernel's cgroupfs in production)."""

    def read(self, path: str) -> str: ...

    def write(self, path: str, value: str) -> None: ...


class OsCgroupFiles:
    """cgroupfs access: one ``write(2)`` per value, never creating or following a symlinked file."""

    def read(self, path: str) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            return handle.read().strip()

    def write(self, path: str, value: str) -> None:
        data = value.encode()
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            raise OSError(errno.EIO, f"short write ({written} of {len(data)} bytes)", path)


def _relative(path: str, what: str) -> str:
    if not path or path.startswith("/") or "\0" in path:
        raise CgroupError(f"{what} {path!r} must be a non-empty relative cgroup directory")
    parts = path.split("/")
    if ".." in parts:
        raise CgroupError(f"{what} {path!r} contains '..'")
    normal = posixpath.normpath(path)
    if normal in ("", "."):
        raise CgroupError(f"{what} {path!r} names the hierarchy root")
    return normal


def _describe(error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0, "?")
    if error.errno == errno.EINVAL:
        return f"kernel rejected the value ({name})"
    return f"{error.strerror or error} ({name})"


class CgroupWriter:
    """Applies and verifies writes below one allowed subtree of a detected hierarchy."""

    def __init__(
        self,
        layout: CgroupLayout,
        allowed_base: str,
        *,
        files: CgroupFiles | None = None,
        page_size: int = mmap.PAGESIZE,
    ) -> None:
        self.layout = layout
        self.base = _relative(allowed_base, "allowed base")
        self.files: CgroupFiles = files or OsCgroupFiles()
        self.page_size = page_size

    def resolve(self, write: Write) -> str:
        """The absolute knob file for ``write``; raises ``CgroupError`` (refusal) naming the path and reason."""
        relative = _relative(write.path, "cgroup path")
        if relative != self.base and not relative.startswith(self.base + "/"):
            raise Refused(f"{write.path!r} is outside the allowed base {self.base!r}; refused")
        controller = controller_of(write.file)
        try:
            directory = absolute_dir(self.layout, relative, controller)
        except CgroupError as error:  # a v1 controller that is not mounted
            raise Unsupported(str(error)) from None
        if not os.path.isdir(directory):
            raise Missing(f"{directory}: cgroup directory missing")
        base_real = os.path.realpath(absolute_dir(self.layout, self.base, controller))
        real = os.path.realpath(directory)
        if real != base_real and not real.startswith(base_real + "/"):
            raise Refused(f"{directory}: resolves to {real}, outside the allowed base {base_real}; refused")
        target = posixpath.join(directory, write.file)
        if not os.path.isfile(target):
            raise Unsupported(
                f"{target}: controller file missing (kernel lacks {controller!r}/this knob, or the controller is"
                " not enabled for this cgroup)"
            )
        return target

    def _apply_one(self, write: Write) -> Applied:
        try:
            target = self.resolve(write)
        except CgroupError as error:
            outcome = (
                "refused"
                if isinstance(error, Refused)
                else "missing"
                if isinstance(error, Missing)
                else "unsupported"
                if isinstance(error, Unsupported)
                else "refused"
            )
            return Applied(write=write, ok=False, error=str(error), outcome=outcome)
        try:
            current = self.files.read(target)
        except OSError as error:
            return Applied(
                write=write, ok=False, error=f"{target}: read failed: {_describe(error)}", outcome="failed"
            )
        if same(write.file, write.value, current, self.page_size):
            return Applied(write=write, ok=True, readback=current, outcome="unchanged", found=current)
        try:
            self.files.write(target, write.value)
        except OSError as error:
            return Applied(
                write=write,
                ok=False,
                readback=current,
                error=f"{target}: write {write.value!r}: {_describe(error)}",
                outcome="rejected" if error.errno in (errno.EINVAL, errno.ERANGE) else "failed",
                found=current,
            )
        try:
            readback = self.files.read(target)
        except OSError as error:
            return Applied(
                write=write,
                ok=False,
                error=f"{target}: read-back failed: {_describe(error)}",
                outcome="failed",
                found=current,
            )
        if not same(write.file, write.value, readback, self.page_size):
            return Applied(
                write=write,
                ok=False,
                readback=readback,
                error=f"{target}: read-back mismatch: wrote {write.value!r}, kernel reports {readback!r}",
                outcome="mismatch",
                found=current,
            )
        return Applied(write=write, ok=True, readback=readback, outcome="applied", found=current)

    def apply(self, plan: Sequence[Write]) -> list[Applied]:
        """One :class:`Applied` per write, in plan order."""
        return [self._apply_one(write) for write in plan]

    def drift(self, plan: Sequence[Write], *, skip_unsupported: bool = False) -> list[Write]:
        """The writes whose file does not currently hold their value; a write that cannot be resolved or read
        counts as drifted (applying it reports why), except, with ``skip_unsupported``, a knob the kernel lacks
        (re-checking it every pass would only repeat the same refusal)."""
        drifted: list[Write] = []
        for write in plan:
            try:
                current = self.files.read(self.resolve(write))
            except Unsupported:
                if not skip_unsupported:
                    drifted.append(write)
                continue
            except (CgroupError, OSError):
                drifted.append(write)
                continue
            if not same(write.file, write.value, current, self.page_size):
                drifted.append(write)
        return drifted
