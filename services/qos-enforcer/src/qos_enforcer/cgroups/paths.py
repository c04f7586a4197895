"""Kubelet cgroup names for pods and containers, and where they sit in a detected hierarchy (pure: no IO).

Relative cgroup directories, exactly as the kubelet (``pkg/kubelet/cm``) and the CRI runtimes name them, with the
default ``--cgroup-root`` (``/``):

========================  ===========================================  ============================================
QoS class                 cgroupfs driver                              systemd driver
========================  ===========================================  ============================================
Guaranteed pod            ``kubepods/pod<uid>``                        ``kubepods.slice/kubepods-pod<uid_>.slice``
Burstable pod             ``kubepods/burstable/pod<uid>``              ``kubepods.slice/kubepods-burstable.slice/``
                                                                       ``kubepods-burstable-pod<uid_>.slice``
BestEffort pod            ``kubepods/besteffort/pod<uid>``             ``kubepods.slice/kubepods-besteffort.slice/``
                                                                       ``kubepods-besteffort-pod<uid_>.slice``
========================  ===========================================  ============================================

``<uid_>`` is the pod UID with ``-`` replaced by ``_`` (systemd reserves ``-`` as the slice nesting separator).
A container's cgroup is a child of its pod's: systemd ``cri-containerd-<id>.scope`` (containerd),
``crio-<id>.scope`` (CRI-O), ``docker-<id>.scope`` (cri-dockerd); cgroupfs ``<id>`` (containerd, cri-dockerd),
``crio-<id>`` (CRI-O).

The same relative directory exists under every controller: on cgroup v2 below the single root
(``/sys/fs/cgroup/kubepods.slice/...``), on v1 below each controller's mount (``/sys/fs/cgroup/cpu,cpuacct/...``,
``/sys/fs/cgroup/cpuset/...``, ``/sys/fs/cgroup/memory/...``); :func:`controller_of` names the controller a
knob file belongs to.

Refused (``CgroupError``): a pod UID that is not lower-case letters and digits joined by ``-`` (a UUID or a static
pod's hash), a container ID that is not lower-case hex, an unknown QoS class, driver or runtime — so no input can
produce ``..`` or ``/`` inside a name.
"""

from __future__ import annotations

import posixpath
import re
from typing import Final, Literal, get_args

from qos_enforcer.cgroups.mode import CgroupError, CgroupLayout

QosClass = Literal["Guaranteed", "Burstable", "BestEffort"]
Driver = Literal["cgroupfs", "systemd"]
Runtime = Literal["containerd", "cri-o", "docker"]
_QOS_CLASSES: Final = get_args(QosClass)
_DRIVERS: Final = get_args(Driver)
_RUNTIMES: Final = get_args(Runtime)

_UID: Final = re.compile(r"[0-9a-z]+(-[0-9a-z]+)*")
_CONTAINER_ID: Final = re.compile(r"[0-9a-f]{1,128}")
_ROOT_PART: Final = re.compile(r"[A-Za-z0-9_.:@-]+")
_QOS_LEVEL: Final[dict[str, str | None]] = {
    "Guaranteed": None,
    "Burstable": "burstable",
    "BestEffort": "besteffort",
}
_SYSTEMD_SCOPE_PREFIX: Final[dict[str, str]] = {
    "containerd": "cri-containerd",
    "cri-o": "crio",
    "docker": "docker",
}
_CGROUPFS_PREFIX: Final[dict[str, str]] = {"containerd": "", "cri-o": "crio-", "docker": ""}
# Knob file prefix -> v1 controller whose mount holds it.
_CONTROLLER_OF_PREFIX: Final[dict[str, str]] = {
    "cpu": "cpu",
    "cpuacct": "cpuacct",
    "cpuset": "cpuset",
    "memory": "memory",
    "pids": "pids",
    "blkio": "blkio",
    "io": "io",
    "hugetlb": "hugetlb",
}


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise CgroupError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


def _check_uid(uid: str) -> None:
    if not _UID.fullmatch(uid):
        raise CgroupError(f"pod uid {uid!r} is not lower-case letters and digits joined by '-'")


def _systemd_name(parts: list[str]) -> str:
    """Kubelet's ``CgroupName.ToSystemd``: each part escaped, nested as ``a.slice/a-b.slice/a-b-c.slice``."""
    escaped = [part.replace("-", "_") for part in parts]
    return "/".join("-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))


def _prefixed(root: str, relative: str) -> str:
    root = root.strip("/")
    if not root:
        return relative
    if not all(_ROOT_PART.fullmatch(part) and part not in (".", "..") for part in root.split("/")):
        raise CgroupError(f"cgroup root {root!r} must be a relative path of plain names (no '..')")
    return f"{root}/{relative}"


def qos_cgroup(qos: QosClass, driver: Driver, root: str = "") -> str:
    """The QoS-level cgroup the kubelet creates (Guaranteed pods live directly under ``kubepods``); ``root`` is the
    kubelet's ``--cgroup-root`` (default ``/``)."""
    _check(qos, _QOS_CLASSES, "QoS class")
    _check(driver, _DRIVERS, "cgroup driver")
    parts = ["kubepods"] + ([level] if (level := _QOS_LEVEL[qos]) else [])
    return _prefixed(root, "/".join(parts) if driver == "cgroupfs" else _systemd_name(parts))


def pod_cgroup(uid: str, qos: QosClass, driver: Driver, root: str = "") -> str:
    """The pod's cgroup directory relative to a controller root, as the kubelet names it."""
    _check_uid(uid)
    _check(qos, _QOS_CLASSES, "QoS class")
    _check(driver, _DRIVERS, "cgroup driver")
    parts = ["kubepods"] + ([level] if (level := _QOS_LEVEL[qos]) else []) + [f"pod{uid}"]
    return _prefixed(root, "/".join(parts) if driver == "cgroupfs" else _systemd_name(parts))


def kubepods_cgroup(driver: Driver, root: str = "") -> str:
    """The kubelet's top-level pods cgroup: the only subtree the node agent writes in."""
    _check(driver, _DRIVERS, "cgroup driver")
    return _prefixed(root, "kubepods" if driver == "cgroupfs" else "kubepods.slice")


def container_cgroup(pod_dir: str, container_id: str, driver: Driver, runtime: Runtime = "containerd") -> str:
    """The container's cgroup below its pod's directory (``pod_dir`` from :func:`pod_cgroup`)."""
    _check(driver, _DRIVERS, "cgroup driver")
    _check(runtime, _RUNTIMES, "container runtime")
    if not _CONTAINER_ID.fullmatch(container_id):
        raise CgroupError(f"container id {container_id!r} is not lower-case hex (strip any 'containerd://')")
    if driver == "systemd":
        leaf = f"{_SYSTEMD_SCOPE_PREFIX[runtime]}-{container_id}.scope"
    else:
        leaf = f"{_CGROUPFS_PREFIX[runtime]}{container_id}"
    return f"{pod_dir.rstrip('/')}/{leaf}"


def controller_of(file: str) -> str:
    """The controller a knob file belongs to (``cpu.cfs_quota_us`` -> ``cpu``, ``cpuset.cpus`` -> ``cpuset``)."""
    prefix = file.split(".", 1)[0]
    controller = _CONTROLLER_OF_PREFIX.get(prefix)
    if controller is None or "/" in file or "." not in file:
        raise CgroupError(f"{file!r} is not a controller knob file this package knows")
    return controller


def absolute_dir(layout: CgroupLayout, relative: str, controller: str) -> str:
    """Where ``relative`` lives for ``controller``: below the v2 root, or below the v1 controller's mount."""
    return posixpath.join(layout.controller_root(controller), relative.strip("/"))
