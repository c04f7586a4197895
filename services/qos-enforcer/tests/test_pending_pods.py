"""What qos-enforcer keeps of a pod between its submission and its binding: the facts read when it arrives, not its
manifest nor the pod the door read; what it then decides is what reading the manifest at binding time gives."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from allot_contracts.events import Event, ObjectRef, PodBound, PodDeleted, PodObserved, PodSubmitted
from allot_contracts.objects.pod import parse_pod
from allot_runtime.processor import Host
from allot_testing.builders import a_pod
from allot_testing.reachable import containers_of, reachable
from qos_enforcer.podfacts import PodFacts
from qos_enforcer.processor import QosEnforcer

RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
GPU_ALLOCATION = json.dumps(
    {"gpu": [{"minor": 1, "id": "gpu-1", "resources": {"koordinator.sh/gpu-core": "50"}}]}
)


def _edge_pod(name: str, *, node: str = "") -> dict[str, Any]:
    """A pod with what enforcement reads from its manifest alone: a container that opts out of HAMi-core's control,
    one without a name, container ids in its status, its own allocation and pod-level QoS annotations (one
    unreadable)."""
    manifest = a_pod(
        name,
        gpus=1,
        labels={"koordinator.sh/qosClass": "LS", "koordinator.sh/gpu-isolation-provider": "HAMi-core"},
        annotations={
            "koordinator.sh/cpuQOS": '{"groupIdentity": 2}',
            "koordinator.sh/memoryQOS": "{not json",
            RESOURCE_STATUS: '{"cpuset": "6-7"}',
            DEVICE_ALLOCATED: GPU_ALLOCATION,
        },
    )
    containers = manifest["spec"]["containers"]
    containers[0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    containers.append({"image": "sidecar", "resources": {"requests": {"cpu": "100m"}}})
    if node:
        manifest["spec"]["nodeName"] = node
    manifest["status"] = {
        "containerStatuses": [
            {"name": "main", "containerID": "containerd://c0ffee"},
            {"containerID": "containerd://nameless"},
        ]
    }
    return manifest


def _arrived(
    kind: type[PodSubmitted] | type[PodObserved], manifest: dict[str, Any]
) -> PodSubmitted | PodObserved:
    meta = manifest["metadata"]
    ref = ObjectRef(namespace=meta["namespace"], name=meta["name"])
    return kind(pod=ref, uid=meta["uid"], manifest=manifest, spec=parse_pod(manifest, [], []))


def _bound(manifest: dict[str, Any], node: str = "n1", **annotations: str) -> PodBound:
    meta = manifest["metadata"]
    ref = ObjectRef(namespace=meta["namespace"], name=meta["name"])
    return PodBound(pod=ref, uid=meta["uid"], attempt=1, node=node, annotations=annotations)


def _step(enforcer: QosEnforcer, event: Event) -> list[object]:
    enforcer.evolve(event, at=0, own=False)
    emits = enforcer.decide(event, at=0)
    for emit in emits:
        enforcer.evolve(emit.event, at=0, own=True)
    return [msgspec.to_builtins(emit.event) for emit in emits]


def test_a_pending_pod_holds_neither_its_manifest_nor_the_pod_the_door_read() -> None:
    enforcer = QosEnforcer({"scope": {"node": "n1"}})
    submitted = _arrived(PodSubmitted, _edge_pod("waiting"))
    observed = _arrived(PodObserved, _edge_pod("observed-unbound"))  # not bound yet: pending as well
    for event in (submitted, observed):
        _step(enforcer, event)
    assert sorted(enforcer.pending) == ["default/observed-unbound", "default/waiting"]
    held = reachable(enforcer)
    for event in (submitted, observed):
        assert event.spec is not None and id(event.spec) not in held
        assert not [c for c in containers_of(event.manifest) if id(c) in held]


def test_a_pod_bound_later_has_the_facts_its_manifest_gives_with_the_binding_annotations() -> None:
    """Container ids, control flags, a nameless container, the binding's allocation over the manifest's own, and the
    issues in the order the manifest is read: as if the manifest were read at binding time."""
    enforcer = QosEnforcer({"scope": {"node": "n1"}})
    for typed in (True, False):
        manifest = _edge_pod(f"edge-{typed}")
        submitted = _arrived(PodSubmitted, manifest)
        if not typed:
            submitted = msgspec.structs.replace(submitted, spec=None)  # recorded before the door read pods
        _step(enforcer, submitted)
        binding = {RESOURCE_STATUS: '{"cpuset": "2-3"}'}
        _step(enforcer, _bound(manifest, **binding))
        facts = enforcer.pods[f"default/edge-{typed}"].facts
        assert (facts.key, facts.uid) == (f"default/edge-{typed}", manifest["metadata"]["uid"])
        # the cpuset the binding wrote, the GPU of the manifest's own allocation
        assert facts.cpuset == (2, 3) and [g.minor for g in facts.gpus] == [1]
        main = facts.containers[0]
        assert (main.container_id, main.gpu, main.disable_control) == ("c0ffee", True, True)
        assert facts.cpu_qos == {"groupIdentity": 2} and facts.memory_qos is None
        assert [i.path for i in facts.issues][-1] == 'metadata.annotations["koordinator.sh/memoryQOS"]'
        if not typed:
            assert [i.path for i in facts.issues] == [
                "spec.containers[1].name",
                'metadata.annotations["koordinator.sh/memoryQOS"]',
            ]
    assert enforcer.pending == {}


def test_a_pod_observed_unbound_then_bound_and_observed_again_follows_its_manifests() -> None:
    enforcer = QosEnforcer()
    manifest = a_pod("web", labels={"koordinator.sh/qosClass": "LS"})
    _step(enforcer, _arrived(PodObserved, manifest))
    _step(enforcer, _bound(manifest, node="n2"))
    assert enforcer.pods["default/web"].facts.containers[0].container_id == ""
    running = {
        **manifest,
        "spec": {**manifest["spec"], "nodeName": "n2"},
        "status": {"containerStatuses": [{"name": "main", "containerID": "docker://beef"}]},
    }
    _step(enforcer, _arrived(PodObserved, running))
    assert enforcer.pods["default/web"].facts.containers[0].container_id == "beef"


def test_a_pod_observed_already_bound_reads_its_own_allocation_and_keeps_nothing_pending() -> None:
    enforcer = QosEnforcer({"scope": {"node": "n1"}})
    manifest = _edge_pod("running", node="n1")
    [planned] = _step(enforcer, _arrived(PodObserved, manifest))
    assert isinstance(planned, dict) and planned["reason"] == "observed bound"
    facts = enforcer.pods["default/running"].facts
    assert (facts.key, facts.uid) == ("default/running", manifest["metadata"]["uid"])
    assert facts.cpuset == (6, 7) and [g.id for g in facts.gpus] == ["gpu-1"]
    assert enforcer.pending == {}


def test_a_pod_deleted_before_its_binding_leaves_nothing_and_its_binding_then_plans_nothing() -> None:
    enforcer = QosEnforcer({"scope": {"node": "n1"}})
    manifest = _edge_pod("gone")
    _step(enforcer, _arrived(PodSubmitted, manifest))
    _step(enforcer, PodDeleted(pod=ObjectRef(namespace="default", name="gone"), uid="uid-default-gone"))
    assert enforcer.pending == {} and _step(enforcer, _bound(manifest)) == []


def test_pending_pods_come_back_from_a_snapshot_and_are_then_bound_alike() -> None:
    manifests = [_edge_pod("a"), a_pod("b", labels={"koordinator.sh/qosClass": "BE"})]
    host = Host(QosEnforcer({"scope": {"node": "n1"}}))
    for manifest in manifests:
        _step(host.processor, _arrived(PodSubmitted, manifest))  # type: ignore[arg-type]
    restored = Host(QosEnforcer({"scope": {"node": "n1"}}))
    restored.restore_state(host.export_state())
    original, copy = host.processor, restored.processor
    assert isinstance(original, QosEnforcer) and isinstance(copy, QosEnforcer)
    assert copy.pending == original.pending and restored.digest() == host.digest()
    for manifest in manifests:
        binding = _bound(manifest, **{DEVICE_ALLOCATED: GPU_ALLOCATION})
        assert _step(copy, binding) == _step(original, binding) != []
    facts: list[PodFacts] = [p.facts for p in copy.pods.values()]
    assert facts == [p.facts for p in original.pods.values()] and len(facts) == 2
