"""HAMi-core GPU isolation delivered as CDI devices: the names the binder and the node agent agree on.

- A container of a pod labelled ``koordinator.sh/gpu-isolation-provider: HAMi-core`` that requests a GPU resource,
  in a pod whose ``device-allocated`` lists GPUs, is *isolated*: it gets HAMi-core's limits through the CDI device
  ``allot.dev/gpu=<pod-uid>-<container>``.
- The node agent (qos-enforcer) writes that device's spec file on the node (``/var/run/cdi``); the pod asks for it
  with the annotation ``cdi-devices.noderesource.dev/container.<container>: "- allot.dev/gpu=<pod-uid>-<container>"``,
  written at bind time. The NRI device injector (containerd or CRI-O with NRI enabled) reads that annotation when the
  container is created and has the runtime inject the CDI device; a spec that is not written yet fails the container
  creation, which the kubelet retries, so a container never starts without its limits (docs/adr/0007).

Pure: reads manifests and annotation values, never the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from allot_contracts.jsonvalue import JsonValue
from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import annotation_object
from allot_contracts.objects.meta import metadata_of

HAMI_CORE: Final = "HAMi-core"
CDI_VENDOR: Final = "allot.dev"
CDI_CLASS: Final = "gpu"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"
NRI_CDI_ANNOTATION_PREFIX: Final = "cdi-devices.noderesource.dev/container."
_GPU_NAMES: Final = (
    n.GPU_RESOURCE_NAMES
    | n.HAMI_NAMES
    | frozenset(old for old, new in n.DEPRECATED_ALIASES.items() if new in n.GPU_RESOURCE_NAMES)
)


def device_name(uid: str, container: str) -> str:
    """The CDI device name of one container's isolation (unique per pod life and container)."""
    return f"{uid}-{container}"


def qualified_name(uid: str, container: str) -> str:
    return f"{CDI_KIND}={device_name(uid, container)}"


def annotation(uid: str, container: str) -> tuple[str, str]:
    """The pod annotation that makes the NRI device injector request the container's CDI device (a YAML list)."""
    return f"{NRI_CDI_ANNOTATION_PREFIX}{container}", f"- {qualified_name(uid, container)}\n"


def _mapping(value: JsonValue) -> Mapping[str, JsonValue]:
    return value if isinstance(value, Mapping) else {}


def requests_gpu(container: Mapping[str, JsonValue]) -> bool:
    """Whether a container asks for a GPU resource (whole GPUs, shares, or HAMi's names) in requests or limits."""
    resources = _mapping(container.get("resources"))
    asked = set(_mapping(resources.get("requests"))) | set(_mapping(resources.get("limits")))
    return bool(asked & _GPU_NAMES)


def isolated_containers(manifest: Mapping[str, JsonValue]) -> list[str]:
    """Containers of a HAMi-core pod that request a GPU, in spec order (empty for other pods)."""
    meta = metadata_of(manifest)
    if _mapping(meta.get("labels")).get(n.LABEL_GPU_ISOLATION_PROVIDER) != HAMI_CORE:
        return []
    containers = _mapping(manifest.get("spec")).get("containers")
    if not isinstance(containers, list):
        return []
    return [
        str(c["name"])
        for c in containers
        if isinstance(c, Mapping) and isinstance(c.get("name"), str) and requests_gpu(c)
    ]


def allocates_gpus(annotations: Mapping[str, JsonValue]) -> bool:
    """Whether a ``device-allocated`` value (JSON text or decoded) lists at least one GPU."""
    return bool(annotation_object(annotations, n.ANN_DEVICE_ALLOCATED).get(n.GPU))


def bind_annotations(
    uid: str, containers: Iterable[str], annotations: Mapping[str, JsonValue]
) -> dict[str, str]:
    """The annotations a binding adds so that the pod's isolated ``containers`` (:func:`isolated_containers`) get
    their CDI devices: one per container, only when the placement (``annotations``) allocated GPUs."""
    names = list(containers)
    if not uid or not names or not allocates_gpus(annotations):
        return {}
    return dict(annotation(uid, container) for container in names)
