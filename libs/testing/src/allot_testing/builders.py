"""Tiny builders for test data: events to append, manifests to apply. Defaults everywhere; override what matters."""

from __future__ import annotations

import itertools
import uuid

from allot_contracts.envelope import NewEvent, stream_id
from allot_contracts.events import Event, ObjectRef, PodDeleted
from allot_contracts.jsonvalue import JsonObject, JsonValue

_counter = itertools.count(1)


def an_event(
    *,
    stream: str | None = None,
    event: Event | None = None,
    event_id: str | None = None,
    expected_version: int | None = None,
    causation_id: str | None = None,
) -> NewEvent:
    n = next(_counter)
    return NewEvent(
        stream_id=stream or stream_id("pod", f"default/p{n}"),
        event=event or PodDeleted(pod=ObjectRef(namespace="default", name=f"p{n}"), uid=f"uid-{n}"),
        event_id=event_id or str(uuid.uuid4()),
        expected_version=expected_version,
        causation_id=causation_id,
    )


def a_node(
    name: str = "node-1",
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> JsonObject:
    allocatable: JsonObject = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: JsonObject = {}
    if taints:
        spec["taints"] = [{**taint} for taint in taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def a_gpu_device(node: str = "node-1", *, gpus: int = 8, memory: str = "80Gi") -> JsonObject:
    devices: list[JsonValue] = [
        {
            "type": "gpu",
            "id": f"GPU-{node}-{minor}",
            "minor": minor,
            "health": True,
            "resources": {
                "koordinator.sh/gpu-core": "100",
                "koordinator.sh/gpu-memory": memory,
                "koordinator.sh/gpu-memory-ratio": "100",
            },
            "topology": {
                "socketID": minor // 4 // 2 if gpus > 4 else 0,
                "nodeID": minor // 4,
                "pcieID": str(minor // 2),
                "busID": f"0000:{minor + 1:02x}:00.0",
            },
        }
        for minor in range(gpus)
    ]
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": node},
        "spec": {"devices": devices},
    }


def a_pod(
    name: str = "pod-1",
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    uid: str | None = None,
) -> JsonObject:
    requests: JsonObject = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    requests.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "labels": {**(labels or {})},
            "annotations": {**(annotations or {})},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ]
        },
    }


def a_qos_pod(
    name: str = "p",
    *,
    qos: str | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    containers: int = 1,
    status_ids: list[str] | None = None,
) -> JsonObject:
    """A pod as QoS enforcement reads it: a Koordinator QoS class label, exactly the `requests` and `limits` given
    (none by default) on each of `containers` containers named c0, c1, ..., and a container status with a
    containerd id per entry of `status_ids`."""
    manifest = a_pod(
        name,
        uid=uid,
        labels={**({"koordinator.sh/qosClass": qos} if qos else {}), **(labels or {})},
        annotations=annotations,
    )
    resources: JsonObject = {}
    if requests is not None:
        resources["requests"] = {**requests}
    if limits is not None:
        resources["limits"] = {**limits}
    manifest["spec"] = {
        "containers": [
            {"name": f"c{i}", "image": "busybox", "resources": resources} for i in range(containers)
        ]
    }
    if status_ids:
        manifest["status"] = {
            "containerStatuses": [
                {"name": f"c{i}", "containerID": f"containerd://{cid}"} for i, cid in enumerate(status_ids)
            ]
        }
    return manifest


def a_quota(
    name: str = "team-a",
    *,
    namespace: str = "default",
    max: dict[str, str] | None = None,
    min: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> JsonObject:
    spec: JsonObject = {"max": {**(max or {"cpu": "100", "memory": "1Ti"})}}
    if min is not None:
        spec["min"] = {**min}
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace, "labels": {**(labels or {})}},
        "spec": spec,
    }


def ref(name: str, namespace: str = "default") -> ObjectRef:
    return ObjectRef(namespace=namespace, name=name)
