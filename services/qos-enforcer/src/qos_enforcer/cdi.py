"""CDI spec files that give a container HAMi-core GPU isolation (``allot.dev/gpu=<pod-uid>-<container>``).

A Container Device Interface spec tells containerd / CRI-O which edits to make to a container's OCI spec when a
device is requested by its fully-qualified name. :func:`gpu_device` builds, purely from its inputs, one transient
spec per container (kind ``allot.dev/gpu``, device name ``<pod-uid>-<container>``, ``cdiVersion`` the lowest one the
spec's features need — 0.5.0 for a name starting with a digit, else 0.3.0 — so that runtimes vendoring an older CDI
library load it too: podman 4.3 skips a 0.6.0 spec as unresolvable) with HAMi-core's environment (HAMi device plugin,
``hami-core`` mode):

- ``NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid>...`` — the allocated GPUs, in allocation order;
- ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m`` — one per visible GPU index i = 0..n-1;
- ``CUDA_DEVICE_SM_LIMIT=<percent>`` — a single value; GPUs with different core percentages are refused rather
  than silently taking the first one's;
- ``CUDA_DEVICE_MEMORY_SHARED_CACHE=<container dir>/<pod-uid>_<container>.cache`` (a name derived from the pod
  and container, as Koordinator's hook uses, so the same inputs always give the same spec);
- ``LD_PRELOAD=<container dir>/libvgpu.so`` — or, when an ``ld.so.preload`` host file is configured, that file
  mounted read-only at ``/etc/ld.so.preload`` instead; neither when the container opts out (HAMi's
  ``CUDA_DISABLE_CONTROL=true``). CDI env edits replace a variable of the same name the image sets.

and mounts, parent before child: the per-container host cache dir ``<cache dir>/<pod-uid>_<container>`` on the
container dir (default ``/usr/local/vgpu``, read-write), ``libvgpu.so`` read-only inside it, and ``/tmp/vgpulock``
(read-write). GPU device nodes are not part of this spec (the NVIDIA runtime or its own CDI spec injects them).

A container asks for its device by the qualified name. In Kubernetes the binding writes the pod annotation
``cdi-devices.noderesource.dev/container.<container>: "- allot.dev/gpu=<pod-uid>-<container>"``
(:func:`allot_contracts.gpu_isolation.annotation`, :attr:`CdiDevice.pod_annotation`), which the NRI device injector
turns into a CDI request when the container is created. A device plugin would instead return the CRI container
annotation ``cdi.k8s.io/allot.gpu_<container>`` (:func:`annotation_key`: the CDI ``AnnotationKey`` convention
``<plugin>_<device id>``, at most 63 characters: longer container names are shortened and suffixed with a hash);
docker, podman and nerdctl take the name with ``--device``.

:func:`validate` repeats the checks the CDI Go library makes when it loads a spec. :func:`write_spec` writes a spec
atomically (temporary file, fsync, rename) as ``allot.dev-gpu_<pod-uid>_<container>.json`` (the library's transient
spec name) and only when its content changes; :func:`sync_specs` writes the desired set and removes this kind's
files for everything else and creates the host directories the mounts need (mode 0777, as HAMi does, so
non-root containers can write); :func:`prune_pods` removes the files of pods that are gone. One process owns a
spec directory's ``allot.dev-gpu_*`` files.

Refused (``CdiError``): a pod UID that is not lower-case letters and digits joined by ``-`` (a UUID, a static pod's
hash), a container name that is not
a DNS-1123 label, no GPUs, a GPU UUID outside ``[A-Za-z0-9_-]`` or listed twice, memory <= 0 MiB (HAMi-core reads
0 as unlimited), cores outside 1..100, relative host or container paths, and any spec :func:`validate` rejects.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import tempfile
from collections.abc import Iterable, Sequence
from typing import Final, TypedDict

import msgspec

from allot_contracts import gpu_isolation

VENDOR: Final = gpu_isolation.CDI_VENDOR
CLASS: Final = gpu_isolation.CDI_CLASS
KIND: Final = gpu_isolation.CDI_KIND
ANNOTATION_PREFIX: Final = "cdi.k8s.io/"
ANNOTATION_PLUGIN: Final = "allot.gpu"
SPEC_PREFIX: Final = f"{VENDOR}-{CLASS}_"
_TMP_PREFIX: Final = ".allot-gpu-tmp-"
_UID: Final = re.compile(r"[0-9a-z]+(-[0-9a-z]+)*")
_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_GPU_UUID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_VENDOR_OR_CLASS: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
_KNOWN_VERSIONS: Final = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_DIR_OPTIONS: Final = ["rw", "nosuid", "nodev", "bind"]
_FILE_OPTIONS: Final = ["ro", "nosuid", "nodev", "bind"]


class CdiError(Exception):
    """An input or spec this module refuses; the message names the field or path and the reason."""


class GpuShare(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU allocated to a container: its UUID, memory limit (MiB) and SM share (percent)."""

    uuid: str
    memory_mib: int
    cores: int


class HamiCorePaths(msgspec.Struct, frozen=True, kw_only=True):
    """Where HAMi-core's pieces are on the host and in the container."""

    libvgpu_host_path: str = "/usr/local/vgpu/libvgpu.so"
    cache_host_dir: str = "/usr/local/vgpu/containers"
    lock_host_dir: str = "/tmp/vgpulock"
    container_dir: str = "/usr/local/vgpu"
    ld_so_preload_host_path: str | None = None


class Mount(TypedDict, total=False):
    hostPath: str
    containerPath: str
    options: list[str]
    type: str


class DeviceNode(TypedDict, total=False):
    path: str
    hostPath: str
    type: str
    major: int
    minor: int
    fileMode: int
    permissions: str
    uid: int
    gid: int


class Hook(TypedDict, total=False):
    hookName: str
    path: str
    args: list[str]
    env: list[str]
    timeout: int


class IntelRdt(TypedDict, total=False):
    closID: str
    l3CacheSchema: str
    memBwSchema: str
    schemata: list[str]
    enableMonitoring: bool


class NetDevice(TypedDict, total=False):
    hostInterfaceName: str
    name: str


class ContainerEdits(TypedDict, total=False):
    """What a CDI device changes in a container's OCI spec (CDI's ``ContainerEdits``)."""

    env: list[str]
    deviceNodes: list[DeviceNode]
    hooks: list[Hook]
    mounts: list[Mount]
    intelRdt: IntelRdt | None
    additionalGids: list[int]
    netDevices: list[NetDevice]


class Device(TypedDict, total=False):
    name: str
    annotations: dict[str, str]
    containerEdits: ContainerEdits


class CdiSpec(TypedDict, total=False):
    """A CDI spec file (the Container Device Interface's ``Spec``; every field the library reads)."""

    cdiVersion: str
    kind: str
    annotations: dict[str, str]
    devices: list[Device]
    containerEdits: ContainerEdits


class CdiDevice(msgspec.Struct, frozen=True, kw_only=True):
    """A built spec with the names that refer to it and the host directories its mounts need."""

    pod_uid: str
    container: str
    qualified_name: str
    file_name: str
    annotation_key: str
    spec: CdiSpec
    host_dirs: tuple[str, ...]

    @property
    def annotation(self) -> dict[str, str]:
        """The CRI container annotation (what a device plugin's Allocate response would carry)."""
        return {self.annotation_key: self.qualified_name}

    @property
    def pod_annotation(self) -> dict[str, str]:
        """The pod annotation written at bind time, read by the NRI device injector."""
        return dict([gpu_isolation.annotation(self.pod_uid, self.container)])


class SyncReport(msgspec.Struct, frozen=True, kw_only=True):
    written: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def _absolute(path: str, field: str) -> str:
    if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
        raise CdiError(f"{field}={path!r} must be an absolute path without '..'")
    return posixpath.normpath(path)


def annotation_key(container: str) -> str:
    """``cdi.k8s.io/allot.gpu_<container>``, shortened with a hash suffix past CDI's 63-character name limit."""
    name = f"{ANNOTATION_PLUGIN}_{container}"
    if len(name) > 63:
        digest = hashlib.sha256(container.encode()).hexdigest()[:8]
        keep = 63 - len(ANNOTATION_PLUGIN) - 1 - len(digest) - 1
        name = f"{ANNOTATION_PLUGIN}_{container[:keep].rstrip('-')}-{digest}"
    return ANNOTATION_PREFIX + name


def gpu_device(
    pod_uid: str,
    container: str,
    gpus: Sequence[GpuShare],
    paths: HamiCorePaths | None = None,
    *,
    disable_control: bool = False,
) -> CdiDevice:
    """The CDI spec giving ``container`` of pod ``pod_uid`` HAMi-core limits on ``gpus``."""
    paths = paths or HamiCorePaths()
    if not _UID.fullmatch(pod_uid):
        raise CdiError(f"pod uid {pod_uid!r} is not lower-case letters and digits joined by '-'")
    if not _LABEL.fullmatch(container):
        raise CdiError(f"container name {container!r} is not a DNS-1123 label")
    if not gpus:
        raise CdiError(f"{pod_uid}/{container}: no GPUs allocated")
    seen: set[str] = set()
    for index, gpu in enumerate(gpus):
        where = f"{pod_uid}/{container} gpu[{index}]"
        if not _GPU_UUID.fullmatch(gpu.uuid) or gpu.uuid in seen:
            raise CdiError(f"{where}: uuid {gpu.uuid!r} is malformed or listed twice")
        seen.add(gpu.uuid)
        if gpu.memory_mib <= 0:
            raise CdiError(
                f"{where}: memory {gpu.memory_mib} MiB must be > 0 (HAMi-core reads 0 as unlimited)"
            )
        if not 1 <= gpu.cores <= 100:
            raise CdiError(f"{where}: cores {gpu.cores} must be a percentage in 1..100")
    if len({gpu.cores for gpu in gpus}) > 1:
        raise CdiError(
            f"{pod_uid}/{container}: core percentages {[g.cores for g in gpus]} differ; CUDA_DEVICE_SM_LIMIT is one"
            " value"
        )
    lib_host = _absolute(paths.libvgpu_host_path, "libvgpu_host_path")
    lock = _absolute(paths.lock_host_dir, "lock_host_dir")
    inside = _absolute(paths.container_dir, "container_dir")
    key = f"{pod_uid}_{container}"
    cache_dir = posixpath.join(_absolute(paths.cache_host_dir, "cache_host_dir"), key)
    lib_inside = posixpath.join(inside, "libvgpu.so")

    env = [f"NVIDIA_VISIBLE_DEVICES={','.join(gpu.uuid for gpu in gpus)}"]
    env += [f"CUDA_DEVICE_MEMORY_LIMIT_{i}={gpu.memory_mib}m" for i, gpu in enumerate(gpus)]
    env += [f"CUDA_DEVICE_SM_LIMIT={gpus[0].cores}", f"CUDA_DEVICE_MEMORY_SHARED_CACHE={inside}/{key}.cache"]
    mounts: list[Mount] = [
        {"hostPath": cache_dir, "containerPath": inside, "options": list(_DIR_OPTIONS)},
        {"hostPath": lib_host, "containerPath": lib_inside, "options": list(_FILE_OPTIONS)},
        {"hostPath": lock, "containerPath": "/tmp/vgpulock", "options": list(_DIR_OPTIONS)},
    ]
    if not disable_control:
        if paths.ld_so_preload_host_path is None:
            env.append(f"LD_PRELOAD={lib_inside}")
        else:
            preload = _absolute(paths.ld_so_preload_host_path, "ld_so_preload_host_path")
            mounts.append(
                {"hostPath": preload, "containerPath": "/etc/ld.so.preload", "options": list(_FILE_OPTIONS)}
            )
    name = gpu_isolation.device_name(pod_uid, container)
    spec: CdiSpec = {
        "cdiVersion": "",
        "kind": KIND,
        "devices": [{"name": name, "containerEdits": {"env": env, "mounts": mounts}}],
    }
    spec["cdiVersion"] = minimum_version(spec)
    if problems := validate(spec):
        raise CdiError(f"{pod_uid}/{container}: built spec is invalid: {'; '.join(problems)}")
    return CdiDevice(
        pod_uid=pod_uid,
        container=container,
        qualified_name=gpu_isolation.qualified_name(pod_uid, container),
        file_name=f"{SPEC_PREFIX}{key}.json",
        annotation_key=annotation_key(container),
        spec=spec,
        host_dirs=(cache_dir, lock),
    )


def minimum_version(spec: CdiSpec) -> str:
    """The lowest CDI version whose features the spec uses (as the Go library's ``MinimumRequiredVersion``)."""
    devices = spec.get("devices") or []
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in devices]
    rdt = [e.get("intelRdt") or {} for e in edits]
    if any(e.get("netDevices") for e in edits) or any(
        r.get("schemata") or r.get("enableMonitoring") for r in rdt
    ):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    _, _, kind_class = str(spec.get("kind", "")).partition("/")
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in kind_class:
        return "0.6.0"
    if any(str(d.get("name", ""))[:1].isdigit() for d in devices):
        return "0.5.0"
    if any(dn.get("hostPath") for e in edits for dn in e.get("deviceNodes") or []):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts") or []):
        return "0.4.0"
    return "0.3.0"


def _edit_problems(edits: ContainerEdits, where: str) -> list[str]:
    problems = [
        f"{where}: env {v!r} is not NAME=VALUE" for v in edits.get("env") or [] if str(v).find("=") <= 0
    ]
    for mount in edits.get("mounts") or []:
        if not mount.get("hostPath") or not mount.get("containerPath"):
            problems.append(f"{where}: mount {mount!r} needs hostPath and containerPath")
    for hook in edits.get("hooks") or []:
        if hook.get("hookName") not in _HOOK_NAMES or not hook.get("path"):
            problems.append(f"{where}: hook {hook!r} has an unknown name or no path")
    return problems


def validate(spec: CdiSpec) -> list[str]:
    """Problems the CDI library would report loading ``spec`` (empty when none)."""
    problems: list[str] = []
    version = str(spec.get("cdiVersion", "")).removeprefix("v")
    if version not in _KNOWN_VERSIONS:
        problems.append(f"cdiVersion {spec.get('cdiVersion')!r} is not a released CDI version")
    elif _KNOWN_VERSIONS.index(version) < _KNOWN_VERSIONS.index(needed := minimum_version(spec)):
        problems.append(f"cdiVersion {version} is below {needed}, which the features used require")
    vendor, _, kind_class = str(spec.get("kind", "")).partition("/")
    if not _VENDOR_OR_CLASS.fullmatch(vendor) or not _VENDOR_OR_CLASS.fullmatch(kind_class):
        problems.append(f"kind {spec.get('kind')!r} is not <vendor>/<class>")
    devices = spec.get("devices") or []
    if not devices:
        problems.append("no devices")
    names = [str(device.get("name", "")) for device in devices]
    problems += [f"device name {n!r} is invalid" for n in names if not _DEVICE_NAME.fullmatch(n)]
    problems += [f"device name {n!r} is listed twice" for n in sorted(set(names)) if names.count(n) > 1]
    problems += _edit_problems(spec.get("containerEdits") or {}, "spec")
    for name, device in zip(names, devices):
        problems += _edit_problems(device.get("containerEdits") or {}, f"device {name!r}")
    return problems


def encode(spec: CdiSpec) -> bytes:
    """The file content for ``spec`` (stable: the same spec always gives the same bytes)."""
    return (json.dumps(spec, indent=2) + "\n").encode()


def ensure_host_dirs(device: CdiDevice) -> None:
    """Create the host directories the spec mounts (world-writable, as HAMi does, for non-root containers)."""
    for directory in device.host_dirs:
        try:
            os.makedirs(directory, exist_ok=True)
            os.chmod(directory, 0o777)
        except OSError as error:
            raise CdiError(f"{directory}: cannot create host directory: {error.strerror}") from error


def write_spec(directory: str, device: CdiDevice) -> bool:
    """Write ``device``'s spec into ``directory`` atomically; False when the file already holds it."""
    if problems := validate(device.spec):
        raise CdiError(f"{device.file_name}: refusing to write an invalid spec: {'; '.join(problems)}")
    data, target = encode(device.spec), os.path.join(directory, device.file_name)
    try:
        with open(target, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    except OSError as error:
        raise CdiError(f"{target}: cannot read existing spec: {error.strerror}") from error
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=_TMP_PREFIX, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as error:
        raise CdiError(f"{target}: cannot write spec: {error.strerror}") from error
    return True


def _ours(directory: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise CdiError(f"{directory}: cannot list CDI specs: {error.strerror}") from error
    return sorted(
        n for n in names if (n.startswith(SPEC_PREFIX) and n.endswith(".json")) or n.startswith(_TMP_PREFIX)
    )


def _remove(directory: str, names: Iterable[str]) -> tuple[str, ...]:
    removed: list[str] = []
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        except OSError as error:
            raise CdiError(
                f"{os.path.join(directory, name)}: cannot remove stale spec: {error.strerror}"
            ) from error
        removed.append(name)
    return tuple(removed)


def sync_specs(directory: str, devices: Sequence[CdiDevice]) -> SyncReport:
    """Make ``directory`` hold exactly ``devices``' specs of this kind (other vendors' files are left alone);
    creates the host directories the specs mount."""
    written: list[str] = []
    unchanged: list[str] = []
    for device in devices:
        ensure_host_dirs(device)
        (written if write_spec(directory, device) else unchanged).append(device.file_name)
    wanted = {device.file_name for device in devices}
    removed = _remove(directory, [n for n in _ours(directory) if n not in wanted])
    return SyncReport(written=tuple(written), unchanged=tuple(unchanged), removed=removed)


def prune_pods(directory: str, live_pod_uids: Iterable[str]) -> tuple[str, ...]:
    """Remove this kind's specs whose pod is not in ``live_pod_uids``, and leftover temporary files."""
    live = set(live_pod_uids)
    stale = [
        n
        for n in _ours(directory)
        if n.startswith(_TMP_PREFIX) or n.removeprefix(SPEC_PREFIX).partition("_")[0] not in live
    ]
    return _remove(directory, stale)
