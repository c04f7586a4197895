"""The web view's usage page shows what ``allot report usage`` computes from the same log (figures, own vs borrowed,
a bar per group), checks its query, and a waiting pod's page carries the nearest miss and the queue place that
``allot explain`` prints. Over simulator logs (no servers)."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_stack.explain import cluster, explain, history
from allot_stack.usage_window import store_usage
from allot_testing import demo
from allot_testing.browser import SKIP_NO_CHROMIUM, differing_fraction, screenshot
from allot_ui.model import UiModel
from allot_ui.server import make_app

DEMO = demo.EXAMPLES / "demo"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo workload: research/train-big waits for quota; research borrows."""
    from allot_sim.scenario import run

    joined = tmp_path_factory.mktemp("usage") / "scenario.yaml"
    joined.write_text("\n---\n".join((DEMO / n).read_text() for n in ("cluster.yaml", "pods.yaml")))
    sim, _, _ = run(str(joined), config={})
    return sim.store


def get(store: Any, *paths: str) -> list[tuple[int, str]]:
    async def go() -> list[tuple[int, str]]:
        async with TestClient(TestServer(make_app(UiModel(store)))) as client:
            out = []
            for path in paths:
                response = await client.get(path)
                out.append((response.status, await response.text()))
            return out

    return asyncio.run(go())


H = 3_600_000_000  # one hour in µs
GIB = 1 << 30


@pytest.fixture(scope="module")
def charged() -> Any:
    """Two pods on one GPU each for two hours: team-a's within its min, team-b's half borrowed."""
    from allot_contracts.decisions.placement import Allocation, Decision, DeviceAlloc
    from allot_contracts.decisions.quota import AdmitDecision
    from allot_contracts.envelope import NewEvent, stream_id
    from allot_contracts.events import ObjectRef, PodPlaced, PodReleased, PodSubmitted, QuotaAdmitted
    from allot_eventstore.memory import InMemoryEventStore

    now = [1_767_225_600_000_000]
    store = InMemoryEventStore(clock=lambda: now[0])

    def record(ns: str, *events: Any) -> None:
        news = [NewEvent(stream_id=stream_id("pod", f"{ns}/p"), event=ev, event_id=f"{ns}-{now[0]}-{i}")
                for i, ev in enumerate(events)]  # fmt: skip
        store.append_sync(news, producer="api")

    for ns, borrowed in (("team-a", "0"), ("team-b", "1")):
        ref = ObjectRef(namespace=ns, name="p")
        request = {"nvidia.com/gpu": "2"}
        facts = [{"direction": "borrow", "dimension": "nvidia.com/gpu", "quota": ns, "amount": borrowed}]
        detail = AdmitDecision(pod=ref.key, quota=ns, admitted=True, status="Success", reason="Admitted", message="",
                               waiting=False, request=request, borrow=facts if borrowed != "0" else [])  # fmt: skip
        device = DeviceAlloc(
            minor=0, resources={"koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory": 80 * GIB}
        )
        alloc = Allocation(node="n1", requests={"cpu": 4000}, devices={"gpu": (device,)})
        record(
            ns,
            PodSubmitted(pod=ref, uid=ns, manifest={}),
            QuotaAdmitted(pod=ref, attempt=1, quota=ns, request=request, used={}, limit={}, detail=detail),
            PodPlaced(
                pod=ref,
                attempt=1,
                node="n1",
                decision=Decision(pod=ref.key, outcome="Scheduled", node="n1", allocation=alloc),
            ),  # fmt: skip
        )
    now[0] += 2 * H
    for ns in ("team-a", "team-b"):
        record(ns, PodReleased(pod=ObjectRef(namespace=ns, name="p"), node="n1"))
    return store


def test_the_usage_page_shows_the_reports_figures_with_a_bar_per_group(charged: Any) -> None:
    [(status, page)] = get(charged, "/usage?by=namespace&since=1d")
    assert status == 200
    _, rows = asyncio.run(store_usage(charged, "1d", None, "namespace"))
    assert [(r.key, float(r.gpu_hours), float(r.gpu_hours_borrowed)) for r in rows] == [
        ("team-a", 4.0, 0.0),
        ("team-b", 4.0, 2.0),
    ]
    for row in rows:
        own, borrowed = float(row.gpu_hours - row.gpu_hours_borrowed), float(row.gpu_hours_borrowed)
        assert f"<td>{row.key}</td><td>{row.pods}</td><td>{own:.2f} / {borrowed:.2f}</td>" in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "team-a: own 4.00 GPU-h" in svg and "team-a: borrowed 0.00 GPU-h" in svg
    assert "team-b: own 2.00 GPU-h" in svg and "team-b: borrowed 2.00 GPU-h" in svg
    widths = re.findall(r'<rect x="[^"]+" y="[^"]+" width="([0-9.]+)" height="18"', svg)
    own_a, brw_a, own_b, brw_b = map(float, widths)
    assert own_a + brw_a == own_b + brw_b and own_b == brw_b == own_a / 2


def test_the_usage_page_refuses_a_bad_query_with_the_parameter_named(store: Any) -> None:
    answers = get(
        store, "/usage?by=team", "/usage?since=yesterday", "/usage?metric=tpu", "/usage?until=2026-01-01"
    )
    assert [status for status, _ in answers] == [400, 400, 400, 400]
    assert "query.by: must be one of quota, namespace, workload" in answers[0][1]
    assert "query.since: 'yesterday' is neither a duration" in answers[1][1]
    assert "query.metric:" in answers[2][1]
    assert "query.until:" in answers[3][1] and "no time zone" in answers[3][1]


def test_a_waiting_pods_page_has_the_nearest_miss_and_queue_place_explain_prints(store: Any) -> None:
    key = "research/train-big"
    expected = explain(key, *asyncio.run(history(store, key)), asyncio.run(cluster(store)))
    assert any(line.startswith("queue:") for line in expected)
    [(status, page)] = get(store, f"/pods/{key}")
    assert status == 200
    import html

    shown = html.unescape(page[page.index("<pre>") + 5 : page.index("</pre>")])
    assert shown.splitlines() == expected


SHOTS = Path(__file__).resolve().parents[3] / "tests" / "integration" / "ui_screenshots"


@SKIP_NO_CHROMIUM
def test_the_usage_page_a_waiting_pods_page_and_defragmentation_render_as_their_screenshots(
    charged: Any, store: Any, defragmented: Any, tmp_path: Path
) -> None:
    """In headless Chromium, compared with the committed screenshots (``ALLOT_UPDATE_SCREENSHOTS=1`` rewrites them
    after a deliberate change: look at them)."""

    async def go() -> None:
        for name, log, path in (
            ("usage", charged, "/usage?by=namespace&since=1d"),
            ("pod-waiting", store, "/pods/research/train-big"),
            ("reservations-defrag", defragmented, "/reservations"),
        ):
            async with TestServer(make_app(UiModel(log))) as server:
                shot = await screenshot(f"http://127.0.0.1:{server.port}{path}", tmp_path / f"{name}.png")
            golden = SHOTS / f"{name}.png"
            if os.environ.get("ALLOT_UPDATE_SCREENSHOTS") == "1":
                golden.write_bytes(shot)
                continue
            fraction = differing_fraction(golden.read_bytes(), shot)
            assert fraction < 0.02, f"{name}: {fraction:.1%} of the pixels differ (see {tmp_path / name}.png)"

    asyncio.run(go())


@pytest.fixture(scope="module")
def defragmented() -> Any:
    """One GPUDefrag round, recorded: a plan that moves one pod so ml/train fits, and a pod it made no plan for."""
    from allot_contracts.envelope import NewEvent, stream_id
    from allot_contracts.events.descheduling import DefragMove, DefragPlan, DefragPlanned, DefragWaiting
    from allot_eventstore.memory import InMemoryEventStore

    store = InMemoryEventStore(clock=lambda: 1_767_225_600_000_000)
    move = DefragMove(pod="ml/half-a", source="gpu-a", target="gpu-b", gpus=[1])
    plan = DefragPlan(
        pending="ml/train", target="gpu-a", gpus=[0, 1], moves=[move], frag_before=1500, frag_after=500
    )
    event = DefragPlanned(
        profile="gpu", round=1, message="1 plan", frag_weight=1, frag_before=1500, frag_after=500, plans=[plan],
        waiting=[DefragWaiting(pod="ml/huge", code="InsufficientFree", reason="asks 8 GPUs, 1.5 free in fragments")],
    )  # fmt: skip
    store.append_sync(
        [NewEvent(stream_id=stream_id("descheduler", "gpu"), event=event, event_id="round-1")],
        producer="reservation-manager",
    )
    return store


def test_the_reservations_page_lists_each_defragmentation_plan_and_what_it_could_not_plan(
    defragmented: Any,
) -> None:
    [(status, page)] = get(defragmented, "/reservations")
    assert status == 200
    section = page[page.index("GPU defragmentation") :]
    assert (
        "<td>ml/train</td><td>fits on gpu-a</td><td>ml/half-a gpu-a → gpu-b</td><td>1.50 → 0.50</td>"
        in section
    )
    assert "<td>ml/huge</td><td>InsufficientFree</td><td>asks 8 GPUs, 1.5 free in fragments</td>" in section
    assert "dry run" in section
