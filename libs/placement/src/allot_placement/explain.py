"""Building decisions and their explanations.

Responsibility: turn the engine's findings into ``Decision`` values — the Scheduled decision with Koordinator's
output annotations and the top-k score breakdown; the Unschedulable one with kube-scheduler's summary
(``0/N nodes are available: 3 Insufficient koordinator.sh/gpu-core, 2 node(s) had untolerated taint {k: v}.``, the
"count reason" strings sorted as strings like kube-scheduler does), sorted reason codes and the reasons of the first
nodes by name; the Rejected one with every field error; and a gang's failure with a "closest offer" line such as
``needs 8 GPU(s) on one PCIe switch, best node offers 6``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.pod import Pod
from allot_placement import reasons as rs
from allot_placement.decision import Decision, GroupDecision, NodeScore
from allot_placement.device_view import fits, make_view
from allot_placement.evaluate import NodeResult, static_filter
from allot_placement.output import output_annotations
from allot_placement.pod import PodSpec
from allot_placement.reasons import Reason, summary_message
from allot_placement.state import Allocation

if TYPE_CHECKING:
    from allot_placement.engine import PlacementEngine

__all__ = ["NODE_NAME", "group_failure", "rejected", "scheduled", "unschedulable"]

NODE_NAME = rs.NODE_NAME


class _Common(TypedDict):
    """The fields every decision of an engine carries."""

    policy: str
    config_version: str
    nodes_total: int


def _common(engine: PlacementEngine) -> _Common:
    return {
        "policy": engine.config.policy,
        "config_version": engine.config_version,
        "nodes_total": engine.nodes_total(),
    }


def scheduled(
    engine: PlacementEngine,
    pod: str,
    spec: PodSpec,
    node: str,
    res: NodeResult,
    tops: list[tuple[str, NodeResult]],
) -> Decision:
    state = engine.node_state(node)
    assert state is not None
    plan = res.plan
    alloc = Allocation(
        node=node,
        requests=spec.requests,
        devices=res.devices,
        cpuset=plan.cpuset if plan else (),
        cpu_exclusive=plan.cpu_exclusive if plan and plan.cpuset else "",
        numa=plan.numa if plan else (),
    )
    bind = plan.bind if plan else ""
    annotations = output_annotations(
        state.inventory, alloc, bind, plan is not None and plan.required, spec.resource_spec
    )
    scores = [NodeScore(node=nm, score=r.score, components=dict(r.components)) for nm, r in tops]
    return Decision(
        pod=pod,
        outcome=n.SCHEDULED,
        node=node,
        annotations=annotations,
        scores=scores,
        allocation=alloc,
        **_common(engine),
    )


def unschedulable(
    engine: PlacementEngine,
    pod: str,
    counts: dict[str, int],
    codes: dict[str, str],
    first: list[tuple[str, tuple[Reason, ...]]],
) -> Decision:
    return Decision(
        pod=pod,
        outcome=n.UNSCHEDULABLE,
        message=summary_message(engine.nodes_total(), counts),
        codes=sorted({codes[m] for m in counts}),
        node_reasons={name: [m for m, _ in reasons] for name, reasons in first},
        **_common(engine),
    )


def rejected(engine: PlacementEngine, pod: str, errors: list[FieldIssue]) -> Decision:
    return Decision(
        pod=pod,
        outcome=n.REJECTED,
        message="; ".join(str(e) for e in errors),
        codes=sorted({e.code for e in errors}),
        **_common(engine),
    )


def closest_gpu_offer(engine: PlacementEngine, spec: PodSpec) -> str | None:
    """For a GPU request: how many suitable GPUs the best node offers within the required scope."""
    req = spec.devices.get(n.GPU)
    if req is None:
        return None
    hint = spec.hints.get(n.GPU)
    scope = hint.required_scope if hint else ""
    best = 0
    for name in engine.node_names():
        state = engine.node_state(name)
        if state is None or state.info is None or state.inventory is None or static_filter(state.info, spec):
            continue
        view = make_view(
            state.inventory, n.GPU, state.dev_used.get(n.GPU, {}), state.vf_used.get(n.GPU, {}), hint, None
        )
        groups: dict[Any, int] = {}
        for m in view.minors:
            if fits(req.per_instance, view.free[m]):
                d = view.devices[m]
                key = d.pcie if scope in ("PCIe", "Device") else d.numa if scope == "NUMANode" else 0
                groups[key] = groups.get(key, 0) + 1
        best = max([best, *groups.values()])
    where = {"PCIe": " on one PCIe switch", "Device": " on one device", "NUMANode": " on one NUMA node"}.get(
        scope, " on one node"
    )
    return f"needs {req.count or 1} GPU(s){where}, best node offers {best}"


def group_failure(
    engine: PlacementEngine, pods: list[Pod], decisions: list[Decision], failed: Decision
) -> GroupDecision:
    spec, _ = engine._spec(pods[len(decisions) - 1])  # noqa: SLF001 - same package
    offer = (
        closest_gpu_offer(engine, spec) if spec is not None and failed.outcome == n.UNSCHEDULABLE else None
    )
    detail = f"{offer} ({failed.message})" if offer else failed.message
    message = f"gang member {failed.pod} cannot be placed: {detail}"
    outcome = n.REJECTED if failed.outcome == n.REJECTED else n.UNSCHEDULABLE
    members: list[Decision] = []
    for m in pods:
        pod = m.key
        if pod == failed.pod:
            members.append(failed)
        else:
            members.append(
                Decision(
                    pod=pod,
                    outcome=n.UNSCHEDULABLE,
                    message=f"gang not placed: {message}",
                    codes=["GangMemberUnschedulable"],
                    **_common(engine),
                )
            )
    return GroupDecision(outcome=outcome, members=members, message=message, failed_pod=failed.pod)
