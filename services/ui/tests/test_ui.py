"""The web audit view over a recorded log (the simulator's, no servers): every page answers from the log, shows what
the log says (GPU holders, quota tree and borrows, a pod's timeline), filters pods, escapes what it shows, and notices
a broken hash chain. The same pages against a running stack, in a real browser: tests/integration/test_ui_browser.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_testing import demo
from allot_ui.model import Chain, UiModel
from allot_ui.pages import layout
from allot_ui.server import make_app


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.demo_store(tmp_path_factory.mktemp("ui"))


def fetch(store: Any, *paths: str) -> Iterator[tuple[int, str]]:
    async def go() -> list[tuple[int, str]]:
        async with TestClient(TestServer(make_app(UiModel(store)))) as client:
            out = []
            for path in paths:
                response = await client.get(path)
                out.append((response.status, await response.text()))
            return out

    return iter(asyncio.run(go()))


def test_every_page_answers_from_the_log(demo_store: Any) -> None:
    paths = [
        "/",
        "/gpus",
        "/pods",
        "/quotas",
        "/gangs",
        "/reservations",
        "/events",
        "/verify",
        "/healthz",
        "/metrics",
    ]
    for path, (status, text) in zip(paths, fetch(demo_store, *paths), strict=True):
        assert status == 200, path
        assert text, path


def test_the_gpu_map_says_who_holds_each_gpu(demo_store: Any) -> None:
    _, text = next(fetch(demo_store, "/gpus"))
    assert 'title="GPU 2: research/notebook-alice (50%)"' in text  # the HAMi-shared half GPU
    assert text.count('class="gpu full"') == 9 and text.count('title="GPU') == 12


def test_pods_are_filtered_and_link_to_their_timeline(demo_store: Any) -> None:
    (_, bound), (_, research), (_, none) = fetch(
        demo_store, "/pods?phase=Bound", "/pods?namespace=research&q=llama", "/pods?node=no-such-node"
    )
    assert "research/train-llama-0" in bound and "0 pod(s)" not in bound
    assert "research/train-llama-1" in research and "serving/" not in research
    assert "0 pod(s)" in none
    (status, timeline), (missing, _) = fetch(demo_store, "/pods/research/train-llama-0", "/pods/x/nobody")
    assert status == 200 and "pod.submitted" in timeline and "placement: node" in timeline
    assert missing == 404


def test_the_quota_tree_and_the_borrow_ledger(demo_store: Any) -> None:
    _, text = next(fetch(demo_store, "/quotas"))
    assert "As the services saw the log at position" in text
    assert ">research<" in text or "research</td>" in text
    assert "Borrow ledger" in text


def test_verify_shows_the_chain_and_each_consumers_lag(demo_store: Any) -> None:
    _, text = next(fetch(demo_store, "/verify"))
    assert "Hash chain intact from position 1 to" in text


def test_a_tampered_event_breaks_the_chain_at_its_position(demo_store: Any) -> None:
    records = asyncio.run(demo_store.read(limit=10))
    chain = Chain()
    chain.check(records[0])
    tampered = msgspec.structs.replace(records[1], payload=records[1].payload.replace(b"}", b' ,"x":1}', 1))
    chain.check(tampered)
    assert chain.verified_to == 1 and "position 2" in chain.problem
    gap = Chain()
    gap.check(records[0])
    gap.check(records[2])
    assert "position 2 is missing" in gap.problem


def test_what_the_page_shows_is_escaped() -> None:
    class Model:
        position = 1
        chain = Chain()

    page = layout("<script>x</script>", "/", "", Model())  # type: ignore[arg-type]
    assert "<script>x" not in page and "&lt;script&gt;x" in page
