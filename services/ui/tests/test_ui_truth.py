"""What the web audit view states is what the log and the services' projections say (issue 25): a pod waiting for
quota is shown as held back under the reason quota-manager's metrics count it, a returned borrow is not listed as
current, a deleted pod holds nothing, and a consumer is behind only as the lag metric counts it. Over simulator logs
(no servers); the same against a running stack in a browser is tests/integration/test_ui_browser.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_runtime.metrics import LogCollector
from allot_stack.logtools import projection
from allot_stack.pipeline import interests
from allot_testing import demo
from allot_ui.model import UiModel
from allot_ui.server import make_app

DEMO = demo.EXAMPLES / "demo"


def sim_store(directory: Path, *names: str) -> Any:
    from allot_sim.scenario import run

    joined = directory / "scenario.yaml"
    joined.write_text("\n---\n".join((DEMO / n).read_text() for n in names))
    sim, _, _ = run(str(joined), config={})
    return sim.store


@pytest.fixture(scope="module")
def waiting_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo workload: research/train-big waits for quota."""
    return sim_store(tmp_path_factory.mktemp("wait"), "cluster.yaml", "pods.yaml")


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The demo workload after research/train-llama-1 finished (deleted): its borrows went back."""
    return sim_store(tmp_path_factory.mktemp("done"), "cluster.yaml", "pods.yaml", "finish-training.yaml")


def fetch(store: Any, *paths: str) -> Iterator[str]:
    async def go() -> list[str]:
        async with TestClient(TestServer(make_app(UiModel(store)))) as client:
            return [await (await client.get(path)).text() for path in paths]

    return iter(asyncio.run(go()))


def section(page: str, heading: str) -> str:
    """The HTML from the heading that starts with ``heading`` to the next heading."""
    found = re.search(rf"<h2[^>]*>{re.escape(heading)}", page)
    assert found is not None, heading
    start = found.start()
    end = page.find("<h2", start + 4)
    return page[start : end if end > 0 else None]


def test_a_pod_waiting_for_quota_is_held_back_under_quota_managers_reason(waiting_store: Any) -> None:
    overview = next(fetch(waiting_store, "/"))
    quota = asyncio.run(projection(waiting_store, "quota-manager"))
    waiting = {key: quota.waiting_reasons.get(key, "InsufficientQuota") for key in quota.waiting}
    assert waiting == {"research/train-big": "InsufficientQuota"}  # what allot_pending_pods counts
    assert "No pod is held back" not in overview
    held = section(overview, "Held back")
    for pod, reason in waiting.items():
        assert re.search(rf">{re.escape(pod)}</a></td><td>Waiting</td><td>{reason}</td>", held), held
    reasons = section(overview, "Why pods are pending")
    assert f"<td>{reason}</td><td>1</td>" in reasons


def test_returned_borrows_are_not_listed_as_current(finished_store: Any) -> None:
    page = next(fetch(finished_store, "/quotas"))
    current = section(page, "Borrow ledger: current")
    returned = section(page, "Borrow ledger: returned")
    assert "research/train-llama-1" not in current  # deleted: what it borrowed went back
    assert "research/train-llama-1" in returned
    quota = asyncio.run(projection(finished_store, "quota-manager"))
    charged = set(quota.charged)
    shown = set(re.findall(r'<a href="/pods/[^"]+">([^<]+)</a>', current))
    assert shown and shown <= charged  # every current borrower is a pod charged to its quota now


def test_a_deleted_pod_holds_no_gpu_and_is_not_listed(finished_store: Any) -> None:
    gpus, pods = fetch(finished_store, "/gpus", "/pods")
    assert "train-llama-1" not in gpus and "train-llama-1" not in pods
    allocator = asyncio.run(projection(finished_store, "device-allocator"))
    for name in allocator.engine.node_names():
        state = allocator.engine.node_state(name)
        used = state.dev_used.get("gpu", {})
        for minor, resources in used.items():
            cores = resources.get("koordinator.sh/gpu-core", 0)
            if cores:  # the page states the same allocation the allocator's projection (and metrics) holds
                row = rf"<tr><td>{minor}</td>(?:(?!</tr>).)*<td>{cores}% / 100%</td>"
                assert re.search(row, section(gpus, f"{name}:")), (name, minor)


def test_each_consumers_lag_is_counted_as_the_lag_metric_counts_it(waiting_store: Any) -> None:
    model = UiModel(waiting_store)
    asyncio.run(model.refresh())
    consumed = interests()
    expected = {}
    for name, position in model.checkpoints.items():
        collector = LogCollector(name)
        consumer = SimpleNamespace(name=name, position=position, types=consumed[name], stats=None)
        asyncio.run(collector.refresh(waiting_store, consumer))
        (sample,) = [f for f in collector.collect() if f.name == "allot_consumer_lag_events"][0].samples
        expected[name] = int(sample.value)
    assert model.lag() == expected
    assert any(
        model.head - p > 0 and expected[n] == 0 for n, p in model.checkpoints.items()
    )  # the old untruth
    page = next(fetch(waiting_store, "/verify"))
    for name, lag in expected.items():
        assert re.search(rf"<td>{re.escape(name)}</td><td>\d+</td><td>{lag}</td>", page)


def test_a_pods_timeline_wraps_long_lines_instead_of_cutting_them(waiting_store: Any) -> None:
    page = next(fetch(waiting_store, "/pods/research/train-big"))
    style = page[page.index("<style>") : page.index("</style>")]
    pre = style[style.index("pre{") :].split("}", 1)[0]
    assert "white-space:pre-wrap" in pre and "overflow-wrap:anywhere" in pre
    assert "exceedDimensions: [cpu nvidia.com/gpu]" in page  # the whole message, as explain prints it


def test_the_gpu_page_lists_one_node_asked_for_and_refuses_a_bad_filter(waiting_store: Any) -> None:
    one, none = fetch(waiting_store, "/gpus?node=gpu-node-b", "/gpus?node=nowhere")
    assert "gpu-node-b: 0 of 4 GPUs free" in one and "gpu-node-a:" not in one
    assert "No node nowhere reports a GPU" in none
    (bad,) = fetch(waiting_store, "/gpus?node=a&node=b")
    assert "query.node: given 2 times" in bad
