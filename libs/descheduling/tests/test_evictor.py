"""The evictor filter (upstream's EvictorFilter and max-eviction-cost filter): which pods may be evicted at all, by
the descheduler and by any PodMigrationJob."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects.selectors import parse_label_selector
from allot_descheduling.evictor import EvictorArgs, PodInput, refusal

EVICT = {"descheduler.alpha.kubernetes.io/evict": "true"}


def pod(**kw: Any) -> PodInput:
    kw.setdefault("owner_kind", "ReplicaSet")
    return PodInput(key="ns/p", node="n1", **kw)


def code(p: PodInput, **args: Any) -> str:
    return refusal(p, EvictorArgs(**args))[0]


@pytest.mark.parametrize(
    ("subject", "args", "expected"),
    [
        (pod(), {}, ""),
        (pod(terminating=True), {}, "Terminating"),
        (pod(), {"exclude_namespaces": ("ns",)}, "NamespaceExcluded"),
        (pod(), {"include_namespaces": ("other",)}, "NamespaceExcluded"),
        (pod(owner_kind="DaemonSet"), {}, "DaemonSet"),
        (pod(owner_kinds=("ReplicaSet", "DaemonSet")), {}, "DaemonSet"),  # any owner, as upstream
        (pod(annotations={"kubernetes.io/config.mirror": "x"}), {}, "MirrorPod"),
        (pod(annotations={"kubernetes.io/config.source": "file"}), {}, "StaticPod"),
        (pod(annotations={"kubernetes.io/config.source": "api"}), {}, ""),
        (pod(owner_kind=""), {}, ""),  # standalone: Allot re-creates a bare pod
        (pod(owner_kind=""), {"evict_bare_pods": False}, "BarePod"),
        (pod(priority=2_000_000_000), {}, "SystemCritical"),
        (pod(priority=2_000_000_000), {"evict_system_critical": True}, ""),
        (pod(priority=100), {"priority_threshold": 100}, "PriorityThreshold"),
        (pod(priority=99), {"priority_threshold": 100}, ""),
        (pod(priority=100), {"priority_threshold": 100, "evict_system_critical": True}, ""),
        (pod(annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}), {}, "EvictionDisabled"),
        (pod(annotations={"scheduling.koordinator.sh/eviction-cost": "2147483646"}), {}, ""),
        (pod(local_storage=True), {}, "LocalStorage"),
        (pod(local_storage=True), {"evict_local_storage": True}, ""),
        (pod(pvc=True), {}, ""),
        (pod(pvc=True), {"ignore_pvc": True}, "PersistentVolumeClaim"),
        (
            pod(labels={"app": "db"}),
            {"label_selector": parse_label_selector({"matchLabels": {"app": "web"}}, "s", [])},
            "LabelSelector",
        ),
    ],
)
def test_refusal(subject: PodInput, args: dict[str, Any], expected: str) -> None:
    got, reason = refusal(subject, EvictorArgs(**args))
    assert got == expected
    assert bool(reason) == bool(expected)


@pytest.mark.parametrize(
    "subject",
    [
        pod(owner_kind="DaemonSet", annotations=EVICT),
        pod(annotations={**EVICT, "kubernetes.io/config.mirror": "x"}),
        pod(priority=2_000_000_000, annotations=EVICT),
        pod(local_storage=True, annotations=EVICT),
        pod(owner_kind="", annotations=EVICT),
        pod(annotations={**EVICT, "scheduling.koordinator.sh/eviction-cost": "2147483647"}),
        pod(terminating=True, annotations=EVICT),
    ],
    ids=["daemonset", "mirror", "critical", "local-storage", "bare", "eviction-cost", "terminating"],
)
def test_the_evict_annotation_lifts_every_check(subject: PodInput) -> None:
    assert code(subject, evict_bare_pods=False) == ""


def test_prevent_eviction_holds_even_an_annotated_pod() -> None:
    subject = pod(annotations={**EVICT, "descheduler.alpha.kubernetes.io/prevent-eviction": "true"})
    assert code(subject) == "EvictionDisabled"
