"""End to end with real processes: a service's config file is edited after it decided, and again before it restarts;
``allot replay --verify`` re-derives every decision under the configuration recorded for it, compares the live
projections under the configuration each service runs now, and names them."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from allot_runtime.recorded_config import config_hash
from allot_testing.builders import a_node, a_pod

pytestmark = pytest.mark.e2e

PACK = {"scoring": {"nodeResourcesFit": {"strategy": "MostAllocated"}}}
SPREAD = {"scoring": {"nodeResourcesFit": {"strategy": "LeastAllocated"}}}


def write(path: Path, docs: list[dict]) -> str:
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_an_edited_config_file_is_not_a_mismatch_and_a_restart_under_it_is_verified_under_it(
    running_stack, tmp_path
):
    stack = running_stack
    config = stack.state_dir / "config" / "device-allocator.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(PACK))
    stack.run("up", "--timeout", "120")
    stack.run("apply", "-f", write(tmp_path / "nodes.yaml", [a_node("n1", cpu="32"), a_node("n2", cpu="32")]))
    stack.run("apply", "-f", write(tmp_path / "a.yaml", [a_pod(f"a{i}", cpu="4") for i in range(3)]))
    placed = {e.payload_dict()["pod"]["name"]: e.payload_dict()["node"] for e in stack.events("pod.placed")}
    assert len(set(placed.values())) == 1, placed

    config.write_text(yaml.safe_dump(SPREAD))  # edited while the service runs with PACK
    verify = stack.run("replay", "--verify")
    assert "all reproduce" in verify.stdout and "MISMATCH" not in verify.stdout, verify.stdout
    assert f"device-allocator     recorded config {config_hash(PACK)[:12]}" in verify.stdout
    assert "device-allocator     at position" in verify.stdout and "DIFFERS" not in verify.stdout

    before = stack.pid("device-allocator")  # restarted by the supervisor: it now runs the edited file
    os.kill(before, signal.SIGKILL)
    stack.wait_for(
        lambda: (
            stack.stack()["processes"]["device-allocator"]["alive"]
            and stack.pid("device-allocator") != before
        ),
        what="the device-allocator restarted",
    )
    stack.run("apply", "-f", write(tmp_path / "b.yaml", [a_pod(f"b{i}", cpu="4") for i in range(3)]))
    placed = {e.payload_dict()["pod"]["name"]: e.payload_dict()["node"] for e in stack.events("pod.placed")}
    assert {placed[f"b{i}"] for i in range(3)}.isdisjoint({placed["a0"]}), placed

    report = json.loads(stack.run("replay", "--verify", "--json").stdout)
    assert report["ok"], report
    used = report["decisions"]["device-allocator"]["configs"]
    assert [c["hash"] for c in used] == [config_hash(PACK), config_hash(SPREAD)]
    assert all(c["recorded"] and c["triggers"] > 0 for c in used), used
    assert report["live"]["device-allocator"]["match"], (
        "the live projection is compared under the config it runs"
    )
