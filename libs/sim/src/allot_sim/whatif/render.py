"""What ``allot what-if`` prints: the answers and the differences as text lines (``-o json`` prints the dicts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_views.units import human

if TYPE_CHECKING:
    from .answer import Answer, QuotaAnswer
    from .run import PodsReport, WindowReport
    from .window import Compared

GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"


def _device(kind: str, device: JsonObject) -> str:
    share = []
    if GPU_CORE in device:
        share.append(f"{device[GPU_CORE]}% core")
    if GPU_MEMORY in device:
        share.append(human(GPU_MEMORY, int(str(device[GPU_MEMORY]))))
    return f"{kind} {device.get('minor')}" + (f" ({', '.join(share)})" if share else "")


def _numa(entry: JsonValue) -> str:
    """``node 1 (cpu 8, memory 64Gi)``: a NUMA node and what the pod takes of it."""
    if not isinstance(entry, dict):
        return str(entry)
    resources = entry.get("resources")
    taken = ", ".join(
        f"{name} {human(name, f'{amount}m' if name == 'cpu' else amount)}"
        for name, amount in sorted(resources.items() if isinstance(resources, dict) else ())
    )
    return f"node {entry.get('node')}" + (f" ({taken})" if taken else "")


def _quota(quota: QuotaAnswer) -> list[str]:
    verdict = "admits it" if quota["admitted"] else f"makes it wait: {quota['message']}"
    lines = [f"  quota:     {quota['quota']} {verdict}"]
    for borrow in quota["borrows"]:
        lenders = ", ".join(
            f"{lender.get('quota')} ({lender.get('kind')}, {lender.get('amount')})"
            for lender in borrow["lenders"]
        )
        lines.append(
            f"  borrows:   {borrow['amount']} {borrow['dimension']} under parent {borrow['parent']}"
            + (f", lent by {lenders}" if lenders else "")
        )
    return lines


def answer_lines(answer: Answer) -> list[str]:
    """One pod's answer."""
    victims = len(answer["preempts"])
    if answer["fits"]:
        head = f"pod {answer['pod']}: fits on node {answer['node']}" + (
            f" once {victims} pod(s) are preempted" if victims else ""
        )
    else:
        waiting = answer["quota"] is not None and not answer["quota"]["admitted"]  # the quota line says why
        head = f"pod {answer['pod']}: does not fit now ({answer['outcome']})" + (
            f": {answer['message']}" if answer["message"] and not waiting else ""
        )
    lines = [head]
    if answer["quota"]:
        lines += _quota(answer["quota"])
    for kind, devices in answer["devices"].items():
        lines.append(f"  devices:   {'; '.join(_device(kind, d) for d in devices)}")
    if answer["cpuset"]:
        lines.append(f"  cpuset:    {','.join(str(c) for c in answer['cpuset'])}")
    if answer["numa"]:
        lines.append(f"  numa:      {'; '.join(_numa(n) for n in answer['numa'])}")
    if answer.get("reservation"):
        lines.append(f"  reservation: {answer['reservation']}")
    for victim in answer["preempts"]:
        lines.append(f"  preempts:  {victim['pod']} on node {victim['node']}")
    if answer["preemption"] and not victims:
        lines.append(f"  preemption: {answer['preemption']}")
    if answer["waits_for"]:
        lines.append(f"  waits for: {answer['waits_for']}")
    lines += [f"  {line}" if not line.startswith(" ") else line for line in answer["nearest"]]
    return lines


def report_lines(report: PodsReport) -> list[str]:
    """``allot what-if -f``: where it was asked, then each pod."""
    lines = [
        f"what-if at position {report['position']} of {report['head']} (log time {report['time']}); "
        f"nothing was written"
    ]
    if report.get("config"):
        lines.append(f"config:    {report['config']['service']} under {report['config']['file']}")
    if report.get("node_labels"):
        lines.append(f"facts:     {report['node_labels']}")
    for answer in report["pods"]:
        lines += answer_lines(answer)
    return lines


def _decision(line: Compared | None) -> str:
    if line is None:
        return "no decision"
    where = f" on {line['node']}" if line.get("node") else ""
    message = f": {line['message']}" if line.get("message") else ""
    return f"{line['outcome']}{where}{message}"


def window_lines(report: WindowReport) -> list[str]:
    """``allot what-if --config --window``: every decision that would differ, then the count."""
    under = " and ".join(x for x in (report["config"], report.get("node_labels", "")) if x)
    lines = [
        f"what-if {report['service']} under {under} over positions {report['from']}..{report['to']}: "
        f"{report['triggers']} trigger(s) decided again; nothing was written"
    ]
    for diff in report["differences"]:
        lines.append(f"{diff['position']:>8} {diff['pod']:<32} recorded {_decision(diff['recorded'])}")
        lines.append(f"{'':>8} {'':<32} would be {_decision(diff['would_be'])}")
    lines.append(f"{len(report['differences'])} decision(s) would differ")
    return lines
