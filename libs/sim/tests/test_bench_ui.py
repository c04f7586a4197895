"""``allot bench ui``'s measurement: the view is served over a simulated log and every page, one pod's included, is
loaded the number of times asked; a page that does not answer 200 stops the benchmark."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from allot_sim.bench import ui
from allot_sim.scenario import run

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "placement" / "01-gpu-cpu-memory-one-numa.yaml"


def test_every_page_is_loaded_over_the_simulated_log() -> None:
    sim, view, _ = run(str(EXAMPLE), config={})
    figures = asyncio.run(ui.load_pages(sim.store, 2))
    pod = sorted(view.pods)[0]
    assert set(figures["page_ms_median"]) == {*ui.PAGES, f"/pods/{pod}"}
    assert set(figures["page_ms_max"]) == set(figures["page_ms_median"])
    assert figures["events"] == len(sim.store.events)
    assert figures["pods"] == len(view.pods) > 0
    assert figures["worst_median_ms"] == max(figures["page_ms_median"].values())
    assert figures["goal_ms"] == ui.GOAL_MS


def test_a_page_that_fails_stops_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    sim, _, _ = run(str(EXAMPLE), config={})
    monkeypatch.setattr(ui, "PAGES", ("/", "/no-such-page"))
    with pytest.raises(RuntimeError, match="/no-such-page: HTTP 404"):
        asyncio.run(ui.load_pages(sim.store, 1))
