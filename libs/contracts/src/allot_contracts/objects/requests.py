"""Pod resource requests: Kubernetes PodRequests semantics plus the Koordinator and HAMi device protocol.

Responsibility:
- ``pod_requests``: ``max(sum(containers), max(initContainers)) + overhead`` per resource, where a container's
  requests default to its limits (API-server defaulting), deprecated ``kubernetes.io/`` device names are renamed to
  ``koordinator.sh/``, and HAMi's per-GPU ``nvidia.com/gpumem`` (MiB), ``nvidia.com/gpucores`` (%) and
  ``nvidia.com/gpumem-percentage`` are converted per container into ``gpu.shared`` + ``gpu-memory`` /
  ``gpu-memory-ratio`` + ``gpu-core``.
- ``device_requests``: per device type, validate the combination of names against Koordinator's table, normalise
  (``nvidia.com/gpu: N`` → core and ratio ``N*100``) and derive the per-instance request and instance count.

Every problem is a ``FieldIssue``: invalid requests are rejected, never scheduled and never retried.
Beyond upstream (documented in docs/placement.md): a per-GPU ``gpu-core`` or ``gpu-memory-ratio`` above 100 after the
count is derived (e.g. ``gpu-core: 200`` with ``gpu-memory-ratio: 100``) is rejected instead of being left pending
forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.quantity import QuantityError, parse_quantity, to_canonical
from allot_contracts.quantity_limits import range_issue

__all__ = ["DeviceRequest", "device_requests", "pod_requests"]

_MIB = 2**20
_REQ_PATH = "spec.containers[*].resources.requests"
_NON_INTEGER_OK = frozenset({n.CPU, n.MEMORY, n.EPHEMERAL_STORAGE})
# The allocated device types other than GPUs, each requested by one resource as a count or a percentage.
_WHOLE_DEVICE_RESOURCES = tuple(
    (t.name, next(iter(t.resources))) for t in n.DEVICE_TYPE_REGISTRY if t.allocated and t.name != n.GPU
)


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What one device type asks for: ``count`` instances of ``per_instance`` each.

    ``count == 0`` means "one per device on the node" (``ApplyForAll``), resolved per node.
    """

    type: str
    total: dict[str, int]
    per_instance: dict[str, int]
    count: int
    shared: bool = False


def _container_requests(c: Any, path: str, errors: list[FieldIssue]) -> dict[str, int]:
    res = c.get("resources") if isinstance(c, dict) else None
    if not isinstance(res, dict):
        return {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    if not isinstance(req, dict) or not isinstance(lim, dict):
        errors.append(FieldIssue(path=f"{path}.resources", message="requests and limits must be maps"))
        return {}
    merged: dict[str, tuple[str, Any]] = {k: ("limits", v) for k, v in lim.items()}
    merged.update({k: ("requests", v) for k, v in req.items()})
    out: dict[str, int] = {}
    for raw_name in sorted(merged):
        where, value = merged[raw_name]
        name = n.DEPRECATED_ALIASES.get(str(raw_name), str(raw_name))
        fpath = f"{path}.resources.{where}[{raw_name}]"
        try:
            q = parse_quantity(value)
        except QuantityError as exc:
            errors.append(FieldIssue(path=fpath, message=str(exc), code="InvalidQuantity"))
            continue
        problem = range_issue(name, to_canonical(name, q), fpath, value)
        if problem is not None:
            errors.append(problem)
            continue
        if name not in _NON_INTEGER_OK and not name.startswith("hugepages-") and q.denominator != 1:
            errors.append(
                FieldIssue(
                    path=fpath,
                    message=f'Invalid value: "{value}": must be an integer',
                    code="InvalidQuantity",
                )
            )
            continue
        out[name] = out.get(name, 0) + to_canonical(name, q)
    if n.HAMI_NAMES & out.keys():
        _convert_hami(out, path, errors)
    return out


def _convert_hami(out: dict[str, int], path: str, errors: list[FieldIssue]) -> None:
    """Rewrite HAMi per-GPU names into Koordinator's shared-GPU protocol, in place."""
    koord = sorted(k for k in out if k in n.GPU_RESOURCE_NAMES and k != n.NVIDIA_GPU)
    if koord:
        errors.append(
            FieldIssue(
                path=f"{path}.resources",
                code="InvalidDeviceRequest",
                message=f"cannot mix HAMi resources ({', '.join(sorted(n.HAMI_NAMES & out.keys()))}) "
                f"with {', '.join(koord)} in one container",
            )
        )
        return
    count = out.pop(n.NVIDIA_GPU, 0) or 1
    mem = out.pop(n.HAMI_GPUMEM, 0)
    cores = out.pop(n.HAMI_GPUCORES, 0)
    pct = out.pop(n.HAMI_GPUMEM_PERCENTAGE, 0)
    if pct > 100:
        errors.append(
            FieldIssue(
                path=f"{path}.resources.requests[{n.HAMI_GPUMEM_PERCENTAGE}]",
                code="InvalidDeviceRequest",
                message=f"invalid {n.HAMI_GPUMEM_PERCENTAGE} value {pct}: must be an integer between 0 and 100",
            )
        )
        return
    if cores > 100:
        errors.append(
            FieldIssue(
                path=f"{path}.resources.requests[{n.HAMI_GPUCORES}]",
                code="InvalidDeviceRequest",
                message=f"invalid {n.HAMI_GPUCORES} value {cores}: must be an integer between 0 and 100 "
                "(percent of one GPU)",
            )
        )
        return
    if mem and pct:
        errors.append(
            FieldIssue(
                path=f"{path}.resources.requests",
                code="InvalidDeviceRequest",
                message=f"declare {n.HAMI_GPUMEM} or {n.HAMI_GPUMEM_PERCENTAGE}, not both",
            )
        )
        return
    out[n.GPU_SHARED] = count
    if mem:
        out[n.GPU_MEMORY] = mem * _MIB * count
    else:
        out[n.GPU_MEMORY_RATIO] = (pct or 100) * count
    if cores:
        out[n.GPU_CORE] = cores * count


def pod_requests(spec: Mapping[str, Any], errors: list[FieldIssue]) -> dict[str, int]:
    """Kubernetes PodRequests over canonical integers, zeros removed, sorted keys."""
    total: dict[str, int] = {}
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        errors.append(FieldIssue(path="spec.containers", message="must be a list"))
        containers = []
    for i, c in enumerate(containers):
        for k, v in _container_requests(c, f"spec.containers[{i}]", errors).items():
            total[k] = total.get(k, 0) + v
    inits = spec.get("initContainers") or []
    for i, c in enumerate(inits if isinstance(inits, list) else []):
        for k, v in _container_requests(c, f"spec.initContainers[{i}]", errors).items():
            total[k] = max(total.get(k, 0), v)
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, dict):
        wrapped = _container_requests({"resources": {"requests": overhead}}, "spec.overhead", errors)
        for k, v in wrapped.items():
            total[k] = total.get(k, 0) + v
    return {k: total[k] for k in sorted(total) if total[k] != 0}


# --- device requests ---------------------------------------------------------------------------------------------


def _pct_ok(v: int | None) -> bool:
    return v is None or v <= 100 or v % 100 == 0


def _shared_ok(r: Mapping[str, int]) -> bool:
    shared = r.get(n.GPU_SHARED, 0)
    if shared <= 0:
        return False
    for name in (n.GPU_CORE, n.GPU_MEMORY_RATIO):
        v = r.get(name)
        if v is not None and (v % shared != 0 or v // shared > 100):
            return False
    return True


def _npu_shared_ok(r: Mapping[str, int]) -> bool:
    return 0 < r.get(n.GPU_SHARED, 0) <= 1 and r.get(n.NPU_DVPP, 0) <= 100


_COMBINATIONS: dict[frozenset[str], Any] = {
    frozenset({n.NVIDIA_GPU}): lambda r: True,
    frozenset({n.AMD_GPU}): lambda r: True,
    frozenset({n.DCU_GPU}): lambda r: True,
    frozenset({n.KOORD_GPU}): lambda r: True,
    frozenset({n.GPU_MEMORY}): lambda r: True,
    frozenset({n.GPU_MEMORY_RATIO}): lambda r: _pct_ok(r.get(n.GPU_MEMORY_RATIO)),
    frozenset({n.GPU_CORE, n.GPU_MEMORY}): lambda r: _pct_ok(r.get(n.GPU_CORE)),
    frozenset({n.GPU_CORE, n.GPU_MEMORY_RATIO}): lambda r: (
        _pct_ok(r.get(n.GPU_CORE)) and _pct_ok(r.get(n.GPU_MEMORY_RATIO))
    ),
    frozenset({n.NPU_CORE, n.GPU_MEMORY_RATIO}): lambda r: _pct_ok(r.get(n.GPU_MEMORY_RATIO)),
    frozenset({n.GPU_SHARED, n.GPU_MEMORY}): _shared_ok,
    frozenset({n.GPU_SHARED, n.GPU_MEMORY_RATIO}): _shared_ok,
    frozenset({n.GPU_SHARED, n.GPU_CORE, n.GPU_MEMORY}): _shared_ok,
    frozenset({n.GPU_SHARED, n.GPU_CORE, n.GPU_MEMORY_RATIO}): _shared_ok,
    frozenset({n.GPU_SHARED, n.NPU_CORE, n.NPU_CPU, n.GPU_MEMORY}): _npu_shared_ok,
    frozenset({n.GPU_SHARED, n.NPU_CORE, n.NPU_CPU, n.GPU_MEMORY, n.NPU_DVPP}): _npu_shared_ok,
}
_PERCENTAGE_NAMES = (n.KOORD_GPU, n.RDMA, n.FPGA)


def _invalid(names: list[str], why: str) -> FieldIssue:
    return FieldIssue(
        path=_REQ_PATH,
        code="InvalidDeviceRequest",
        message=f"invalid resource device requests: [{' '.join(names)}] ({why})",
    )


def _gpu_request(r: dict[str, int], errors: list[FieldIssue]) -> DeviceRequest | None:
    present = sorted(r)
    check = _COMBINATIONS.get(frozenset(present))
    if check is None:
        errors.append(_invalid(present, "not a supported combination; see docs/placement.md for the table"))
        return None
    if not check(r):
        errors.append(
            _invalid(
                present,
                "a percentage above 100 must be a multiple of 100, and with gpu.shared every "
                "percentage must divide evenly into at most 100 per GPU",
            )
        )
        return None
    for whole in n.WHOLE_GPU_NAMES:
        if whole in r:
            r = {n.GPU_CORE: r[whole] * 100, n.GPU_MEMORY_RATIO: r[whole] * 100}
    if n.KOORD_GPU in r:
        r = {n.GPU_CORE: r[n.KOORD_GPU], n.GPU_MEMORY_RATIO: r[n.KOORD_GPU]}
    count = 1
    ratio = r.get(n.GPU_MEMORY_RATIO)
    if r.get(n.GPU_SHARED, 0) > 0:
        count = r[n.GPU_SHARED]
    elif ratio is not None and ratio > 100 and ratio % 100 == 0:
        count = ratio // 100
    per: dict[str, int] = {}
    for name in (n.GPU_CORE, n.NPU_CORE, n.NPU_CPU, n.NPU_DVPP):
        if name in r:
            per[name] = r[name] // count
    shared = False
    if ratio is not None:
        per[n.GPU_MEMORY_RATIO] = ratio // count
        shared = per[n.GPU_MEMORY_RATIO] < 100
    elif n.GPU_MEMORY in r:
        per[n.GPU_MEMORY] = r[n.GPU_MEMORY] // count
        shared = True
    for name in (n.GPU_CORE, n.GPU_MEMORY_RATIO):
        if per.get(name, 0) > 100:
            errors.append(
                _invalid(
                    present,
                    f"{name} works out at {per[name]} per GPU for {count} GPU(s); one GPU "
                    "offers 100 — raise the GPU count (gpu-memory-ratio or gpu.shared)",
                )
            )
            return None
    return DeviceRequest(
        type=n.GPU,
        total={k: r[k] for k in sorted(r)},
        per_instance=dict(sorted(per.items())),
        count=count,
        shared=shared,
    )


def _simple_request(dtype: str, name: str, q: int, strategy: str, exclusive: str) -> DeviceRequest:
    if q > 100 and q % 100 == 0:
        count, per = q // 100, 100
    elif strategy == "ApplyForAll":
        count, per = 0, q
    elif strategy == "RequestsAsCount":
        count, per = q, 100 if exclusive == "DeviceLevel" else 1
    else:
        count, per = 1, q
    return DeviceRequest(type=dtype, total={name: q}, per_instance={name: per}, count=count)


def device_requests(
    requests: Mapping[str, int], strategies: Mapping[str, tuple[str, str]], errors: list[FieldIssue]
) -> dict[str, DeviceRequest]:
    """Per device type (in canonical type order): the validated, normalised request.

    ``strategies`` maps a device type to its hint's ``(allocateStrategy, exclusivePolicy)``.
    """
    out: dict[str, DeviceRequest] = {}
    for name in _PERCENTAGE_NAMES:
        q = requests.get(name, 0)
        if q > 100 and q % 100 != 0:
            errors.append(
                FieldIssue(
                    path=_REQ_PATH,
                    code="InvalidDeviceRequest",
                    message=f"invalid resource unit {name}: {q} (above 100 it must be a multiple of 100)",
                )
            )
    if errors:
        return out
    gpu = {k: v for k, v in requests.items() if k in n.GPU_RESOURCE_NAMES and v}
    if gpu:
        req = _gpu_request(gpu, errors)
        if req is not None:
            out[n.GPU] = req
    for dtype, name in _WHOLE_DEVICE_RESOURCES:
        q = requests.get(name, 0)
        if q:
            strategy, exclusive = strategies.get(dtype, ("", ""))
            out[dtype] = _simple_request(dtype, name, q, strategy, exclusive)
    return out
