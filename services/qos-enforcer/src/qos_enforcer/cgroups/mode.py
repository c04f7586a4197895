"""Which cgroup hierarchy a node runs, and where each controller is mounted.

Modes (the names systemd and the kubelet use):

- ``unified``: a ``cgroup2`` filesystem is mounted at the root (default ``/sys/fs/cgroup``); every controller lives
  in that single tree.
- ``legacy``: only ``cgroup`` (v1) filesystems are mounted below the root, one per controller or co-mounted group
  (``/sys/fs/cgroup/cpu,cpuacct``, ``/sys/fs/cgroup/memory``, ...).
- ``hybrid``: v1 controller mounts below the root plus a ``cgroup2`` mount below it (``/sys/fs/cgroup/unified``)
  that systemd uses for process tracking. Resource knobs are written to the v1 controllers, as the kubelet does.

Detection reads ``/proc/self/mountinfo`` (:func:`parse_mountinfo` and :func:`layout_from_mounts` are pure); when
no cgroup filesystem is mounted at or below the root (a test tree, a container with a bind-mounted hierarchy)
:func:`layout_from_tree` probes the root's layout instead: ``cgroup.controllers`` marks a v2 directory,
``cgroup.procs`` without it a v1 hierarchy named by its directory (``cpu,cpuacct`` serves ``cpu`` and ``cpuacct``).

Refused (``CgroupError``): a root with no cgroup hierarchy at all; a mountinfo line that does not have the
documented shape.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final, Literal

import msgspec

DEFAULT_ROOT: Final = "/sys/fs/cgroup"
MOUNTINFO: Final = "/proc/self/mountinfo"

# Options of a v1 cgroup mount that are mount flags or hierarchy options, not controller names.
_NOT_CONTROLLERS: Final = frozenset(
    {"rw", "ro", "nosuid", "nodev", "noexec", "relatime", "noatime", "nodiratime", "strictatime", "lazytime"}
    | {"clone_children", "noprefix", "xattr", "cpuset_v2_mode", "favordynmods"}
)
_ESCAPE: Final = re.compile(r"\\([0-7]{3})")


class CgroupError(Exception):
    """A cgroup hierarchy, path or value this package refuses; the message names the path and the reason."""


class CgroupMode(StrEnum):
    UNIFIED = "unified"
    LEGACY = "legacy"
    HYBRID = "hybrid"


class CgroupMount(msgspec.Struct, frozen=True, kw_only=True):
    """One mounted cgroup filesystem: v1 lists its controllers (``name=systemd`` for named hierarchies)."""

    mount_point: str
    version: Literal[1, 2]
    controllers: tuple[str, ...] = ()
    root: str = "/"  # the part of the hierarchy mounted here (not "/" inside some containers)


class CgroupLayout(msgspec.Struct, frozen=True, kw_only=True):
    """The detected hierarchy: v1 controller -> mount point, and the cgroup2 mount point if any."""

    mode: CgroupMode
    root: str
    v1: Mapping[str, str] = msgspec.field(default_factory=dict)
    unified: str | None = None

    @property
    def version(self) -> Literal[1, 2]:
        """The hierarchy resource knobs are written to: 2 only when unified (hybrid keeps controllers on v1)."""
        return 2 if self.mode is CgroupMode.UNIFIED else 1

    def controller_root(self, controller: str) -> str:
        """The directory under which ``controller``'s cgroups live; raises when a v1 controller is not mounted."""
        if self.mode is CgroupMode.UNIFIED:
            assert self.unified is not None
            return self.unified
        mount = self.v1.get(controller)
        if mount is None:
            raise CgroupError(f"{self.root}: cgroup v1 controller {controller!r} is not mounted")
        return mount


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[CgroupMount, ...]:
    """The cgroup mounts of a ``/proc/<pid>/mountinfo`` text, in mount order (later lines mount over earlier)."""
    mounts: list[CgroupMount] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
            fstype, super_options = fields[dash + 1], fields[dash + 3]
        except (ValueError, IndexError):
            raise CgroupError(
                f"mountinfo line {number}: no '- fstype source options' part: {line!r}"
            ) from None
        if fstype == "cgroup2":
            mounts.append(CgroupMount(mount_point=_unescape(fields[4]), version=2, root=_unescape(fields[3])))
        elif fstype == "cgroup":
            options = [o for o in super_options.split(",") if o and o not in _NOT_CONTROLLERS]
            controllers = tuple(o for o in options if "=" not in o or o.startswith("name="))
            mounts.append(
                CgroupMount(
                    mount_point=_unescape(fields[4]),
                    version=1,
                    controllers=controllers,
                    root=_unescape(fields[3]),
                )
            )
    return tuple(mounts)


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def layout_from_mounts(mounts: Iterable[CgroupMount], root: str = DEFAULT_ROOT) -> CgroupLayout | None:
    """The layout the mounts at or below ``root`` form; None when no cgroup filesystem is mounted there."""
    root = posixpath.normpath(root)
    visible: dict[str, CgroupMount] = {}
    for mount in mounts:  # a later mount on the same point hides the earlier one
        point = posixpath.normpath(mount.mount_point)
        if _below(point, root):
            visible[point] = mount
    if not visible:
        return None
    if root in visible and visible[root].version == 2:
        return CgroupLayout(mode=CgroupMode.UNIFIED, root=root, unified=root)
    v1: dict[str, str] = {}
    unified: str | None = None
    for point, mount in sorted(visible.items()):
        if mount.version == 2:
            unified = unified or point
        else:
            for controller in mount.controllers:
                v1.setdefault(controller, point)
    if not v1:
        raise CgroupError(f"{root}: cgroup2 is mounted below the root but not at it, and no v1 controller is")
    mode = CgroupMode.HYBRID if unified else CgroupMode.LEGACY
    return CgroupLayout(mode=mode, root=root, v1=v1, unified=unified)


def layout_from_tree(root: str = DEFAULT_ROOT) -> CgroupLayout:
    """The layout read from the directories under ``root`` (for trees not listed in mountinfo)."""
    root = posixpath.normpath(root)
    if os.path.isfile(posixpath.join(root, "cgroup.controllers")):
        return CgroupLayout(mode=CgroupMode.UNIFIED, root=root, unified=root)
    if not os.path.isdir(root):
        raise CgroupError(f"{root}: not a directory, no cgroup hierarchy here")
    v1: dict[str, str] = {}
    unified: str | None = None
    for name in sorted(os.listdir(root)):
        path = posixpath.join(root, name)
        if not os.path.isdir(path):
            continue
        if os.path.isfile(posixpath.join(path, "cgroup.controllers")):
            unified = unified or path
        elif os.path.isfile(posixpath.join(path, "cgroup.procs")):
            # a symlink such as cpu -> cpu,cpuacct resolves to the co-mounted directory
            target = posixpath.join(root, posixpath.basename(os.path.realpath(path)))
            names = [n if n != "systemd" else "name=systemd" for n in name.split(",")]
            for controller in names:
                v1.setdefault(controller, target)
    if not v1:
        raise CgroupError(f"{root}: no cgroup v2 root and no cgroup v1 controller directory found")
    mode = CgroupMode.HYBRID if unified else CgroupMode.LEGACY
    return CgroupLayout(mode=mode, root=root, v1=v1, unified=unified)


def detect(root: str = DEFAULT_ROOT, mountinfo: str = MOUNTINFO) -> CgroupLayout:
    """The node's layout: from mountinfo when it lists a cgroup mount at or below ``root``, else from the tree."""
    try:
        with open(mountinfo, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise CgroupError(f"{mountinfo}: cannot read mountinfo: {error.strerror}") from error
    layout = layout_from_mounts(parse_mountinfo(text), root)
    return layout if layout is not None else layout_from_tree(root)
