"""The typical-pod distribution FGD measures fragmentation against (``allot sim typical-pods``), learned from a
workload — an openb pod list or the pods recorded in the live log — as the ``fragmentation`` section of a
device-allocator config (the paper's way: the most popular shapes covering a threshold % of pods, weighted by count).

FGD decisions stay pure: the distribution is configuration (recorded in every decision's ``config_version``), so
re-learning it is a deliberate config change, not something that drifts inside a decision.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

from allot_contracts.jsonvalue import JsonObject
from allot_intake.errors import InputError


def from_trace(path: Path) -> list[tuple[int, int, int, tuple[str, ...]]]:
    from allot_placement.openb import read_pods

    if not path.exists():
        raise InputError(f"pod list not found: {path}")
    return [(p.cpu_milli, p.num_gpu, p.gpu_milli if p.num_gpu else 0, p.gpu_spec) for p in read_pods(path)]


async def from_log() -> list[tuple[int, int, int, tuple[str, ...]]]:
    from allot_placement.fragmentation import pod_shape
    from allot_stack.connect import bounded_store, endpoints

    store = bounded_store(endpoints().database_url)
    try:
        shapes = []
        async for record in store.iterate(types=["pod.submitted"]):
            shape = pod_shape(record.payload_dict()["manifest"])
            if shape is not None:
                shapes.append(shape)
        return shapes
    finally:
        await store.close()


class Fragmentation(TypedDict):
    typicalPods: list[JsonObject]


class ConfigSection(TypedDict):
    """What ``allot sim typical-pods`` prints: a device-allocator config (the policy with ``--policy``)."""

    policy: NotRequired[str]
    fragmentation: Fragmentation


def config_section(shapes: list[tuple[int, int, int, tuple[str, ...]]], threshold: int) -> ConfigSection:
    """The device-allocator config's ``fragmentation`` section with the typical pods of ``shapes``."""
    from allot_placement.fragmentation import typical_pods

    if not shapes:
        raise InputError("no pods to learn from")
    return {"fragmentation": {"typicalPods": [t.to_dict() for t in typical_pods(shapes, threshold)]}}
