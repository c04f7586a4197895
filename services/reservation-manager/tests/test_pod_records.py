"""What reservation-manager keeps of a known pod until it is deleted: its manifest encoded, decoded afresh only where
it is read whole; what admission and the evictor filter read of it, read on arrival; the typed pod with its repeated
strings and default sections shared. Decisions are those of keeping the manifest and the pod as they arrived."""

from __future__ import annotations

from unittest import mock

import msgspec

from allot_contracts import kube
from allot_contracts.events import Event, ObjectRef, PodBound, PodObserved, PodSubmitted
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import parse_pod
from allot_reservation.evictee import pod_input
from allot_reservation.testing import Driver, a_pod_manifest
from allot_reservation.world import PodRecord, World
from allot_runtime.processor import Host
from allot_testing.reachable import containers_of, reachable
from reservation_manager.processor import ReservationManager

AFFINITY = "scheduling.koordinator.sh/reservation-affinity"
EVICT = "descheduler.alpha.kubernetes.io/evict"
COST = "controller.kubernetes.io/pod-deletion-cost"


def _arrived(manifest: JsonObject) -> PodSubmitted | PodObserved:
    """The pod's arrival as a service receives it: decoded from the recorded JSON (every string its own object)."""
    meta = manifest["metadata"]
    spec = manifest["spec"]
    assert isinstance(meta, dict) and isinstance(spec, dict)
    ref = ObjectRef(namespace=str(meta["namespace"]), name=str(meta["name"]))
    kind = PodObserved if spec.get("nodeName") else PodSubmitted
    event = kind(pod=ref, uid=str(meta["uid"]), manifest=manifest, spec=parse_pod(manifest, [], []))
    return msgspec.json.decode(msgspec.json.encode(event), type=kind)


def _bound(key: str, uid: str, node: str) -> PodBound:
    namespace, name = key.split("/", 1)
    event = PodBound(pod=ObjectRef(namespace=namespace, name=name), uid=uid, attempt=1, node=node)
    return msgspec.json.decode(msgspec.json.encode(event), type=PodBound)


def _volumes(manifest: JsonObject, *volumes: JsonObject) -> JsonObject:
    spec = manifest["spec"]
    assert isinstance(spec, dict)
    spec["volumes"] = list(volumes)
    return manifest


def test_a_known_pod_holds_no_decoded_manifest() -> None:
    d = Driver()
    arrivals: list[Event] = [
        _arrived(a_pod_manifest("waiting", labels={"app": "web"}, annotations={"a": "1"})),
        _arrived(a_pod_manifest("running", controller=("ReplicaSet", "web"), node="n1")),
    ]
    for event in arrivals:
        d.feed(event)
    assert sorted(d.engine.world.pods) == ["default/running", "default/waiting"]
    held = reachable(d.engine)
    for event in arrivals:
        assert isinstance(event, PodSubmitted | PodObserved)
        assert not [c for c in containers_of(event.manifest) if id(c) in held]


def test_the_manifest_read_is_the_pod_s_as_it_arrived_and_the_reader_s_own_copy() -> None:
    manifest = a_pod_manifest("web-0", labels={"app": "web"}, annotations={"note": "x"})
    d = Driver()
    d.pod(manifest)
    rec = d.engine.world.pods["default/web-0"]
    first = rec.manifest()
    assert first == manifest and first is not rec.manifest()
    meta = first["metadata"]
    assert isinstance(meta, dict) and isinstance(meta["labels"], dict)
    meta["labels"]["app"] = "changed"
    assert rec.manifest() == manifest and kube.annotations_of(rec.manifest()) == {"note": "x"}


def test_what_the_evictor_filter_reads_is_what_the_manifest_says() -> None:
    cases: list[tuple[JsonObject, dict[str, str], bool, bool]] = [
        (a_pod_manifest("plain", node="n1"), {}, False, False),
        (a_pod_manifest("evict-me", node="n1", annotations={EVICT: ""}), {EVICT: ""}, False, False),
        (_volumes(a_pod_manifest("scratch", node="n1"), {"name": "s", "emptyDir": {}}), {}, True, False),
        (
            _volumes(a_pod_manifest("host", node="n1"), {"name": "h", "hostPath": {"path": "/"}}),
            {},
            True,
            False,
        ),
        (
            _volumes(a_pod_manifest("claim", node="n1"), {"name": "c", "persistentVolumeClaim": {}}),
            {},
            False,
            True,
        ),
        (_volumes(a_pod_manifest("odd", node="n1"), "not a volume"), {}, False, False),  # type: ignore[arg-type]
        (  # only the annotations the evictor and the descheduler read are kept (a round reads every pod)
            a_pod_manifest("noted", node="n1", annotations={"note": "x", COST: "10"}),
            {COST: "10"},
            False,
            False,
        ),
    ]
    d = Driver()
    for manifest, expected, local_storage, pvc in cases:
        d.pod(manifest)
        meta = manifest["metadata"]
        assert isinstance(meta, dict)
        with mock.patch.object(
            PodRecord, "manifest", side_effect=AssertionError("decoded")
        ):  # not read whole
            subject = pod_input(d.engine.world.pods[f"default/{meta['name']}"])
        assert (subject.annotations, subject.local_storage, subject.pvc) == (expected, local_storage, pvc)


def test_a_pod_the_event_carries_untyped_is_read_from_its_manifest() -> None:
    manifest = a_pod_manifest(
        "old", node="n1", priority=7, annotations={"k": "v", "descheduler.alpha.kubernetes.io/evict": "true"}
    )
    meta = manifest["metadata"]
    assert isinstance(meta, dict)
    meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    rec = PodRecord("default/old", "uid-default-old", manifest, node="n1", bound=True)
    subject = pod_input(rec)
    # the annotations the evictor and the descheduler read, as the manifest has them (the others are not read)
    assert (subject.priority, subject.terminating, subject.annotations) == (
        7,
        True,
        {"descheduler.alpha.kubernetes.io/evict": "true"},
    )
    assert rec.facts()[0].name == "old" and rec.pod is None


def test_a_pod_stating_a_reservation_affinity_is_refused_every_reservation_when_none_may_be_used() -> None:
    d = Driver()
    d.pod(a_pod_manifest("picky", annotations={AFFINITY: '{"name": "r1"}'}))
    d.pod(a_pod_manifest("easy"))
    [picky] = d.admit("default/picky")
    [easy] = d.admit("default/easy")
    assert msgspec.to_builtins(picky)["match"]["required"] is True
    assert msgspec.to_builtins(easy).get("match") is None


def test_the_typed_pod_shares_its_repeated_strings_and_default_sections() -> None:
    d = Driver()
    arrivals = [
        _arrived(a_pod_manifest(f"web-{i}", namespace="team-a", controller=("ReplicaSet", "web")))
        for i in range(2)
    ]
    for event in arrivals:
        d.feed(event)
        d.feed(_bound(event.pod.key, event.uid, "node-7"))
    a, b = (d.engine.world.pods[f"team-a/web-{i}"] for i in range(2))
    assert a.pod is not None and b.pod is not None
    assert [a.pod, b.pod] == [e.spec for e in arrivals]  # equal values
    assert a.pod.uid is a.uid and a.node is b.node == "node-7"
    assert a.pod.namespace is b.pod.namespace and a.pod.kube_qos is b.pod.kube_qos
    assert a.pod.containers[0].name is b.pod.containers[0].name
    assert a.pod.owners[0].kind is b.pod.owners[0].kind and a.pod.owners[0].uid is b.pod.owners[0].uid
    assert a.pod.reservation is b.pod.reservation and a.pod.numa_spec is b.pod.numa_spec


def test_known_pods_come_back_from_a_snapshot_with_their_manifests_and_what_they_share() -> None:
    manifests = [
        a_pod_manifest("a", annotations={AFFINITY: "{}"}),
        _volumes(a_pod_manifest("b", node="n1"), {"name": "c", "persistentVolumeClaim": {}}),
    ]
    host = Host(ReservationManager())
    for manifest in manifests:
        host.processor.evolve(_arrived(manifest), at=0, own=False)
    restored = Host(ReservationManager())
    restored.restore_state(host.export_state())
    assert restored.digest() == host.digest()
    # a pod known after the restore shares the default sections with those restored, as it does in the live host
    later = _arrived(a_pod_manifest("c"))
    for each in (host, restored):
        each.processor.evolve(later, at=0, own=False)
    assert restored.export_state() == host.export_state()
    original, copy = host.processor, restored.processor
    assert isinstance(original, ReservationManager) and isinstance(copy, ReservationManager)
    for key, rec in original.engine.world.pods.items():
        back = copy.engine.world.pods[key]
        assert back.manifest() == rec.manifest() and back.pod == rec.pod
        assert (back.affinity_stated, back.evictor_annotations, back.local_storage, back.pvc) == (
            rec.affinity_stated,
            rec.evictor_annotations,
            rec.local_storage,
            rec.pvc,
        )
        assert pod_input(back) == pod_input(rec)


def test_a_workload_s_pods_are_its_known_pods_in_key_order_as_they_come_and_go() -> None:
    """The workload index answers as a scan of every known pod would: the pods of one controller (typed or not), in
    key order, without the deleted ones, and a pod known again under another controller moves with it. It is read
    without building any pod's matching facts."""
    world = World()

    def known(name: str, controller: tuple[str, str] | None, *, typed: bool = True) -> None:
        manifest = a_pod_manifest(name, controller=controller)
        pod = parse_pod(manifest, [], []) if typed else None
        world.known(f"default/{name}", f"uid-default-{name}", manifest, pod=pod)

    known("web-2", ("ReplicaSet", "web"))
    known("web-1", ("ReplicaSet", "web"), typed=False)
    known("db-0", ("StatefulSet", "db"))
    known("bare", None)
    assert [p.key for p in world.workload_pods("uid-web")] == ["default/web-1", "default/web-2"]
    assert [p.key for p in world.workload_pods("uid-db")] == ["default/db-0"]
    assert world.workload_key(world.pods["default/bare"]) is None
    assert all(p._facts is None for key, p in world.pods.items() if key != "default/web-1")

    world.forget("default/web-2")
    known("db-0", ("ReplicaSet", "web"))  # the same key known again, now another workload's
    assert [p.key for p in world.workload_pods("uid-web")] == ["default/db-0", "default/web-1"]
    assert world.workload_pods("uid-db") == [] and "uid-db" not in world.workloads
    world.forget("default/bare")
    world.forget("default/unknown")  # nothing to forget
    assert sorted(world.pods) == ["default/db-0", "default/web-1"]
