"""The real stack as processes: `allot up` (supervisor, relay, seven services) on the test's database and bus."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allot_eventstore.postgres import PostgresEventStore

ALLOT = str(Path(sys.executable).parent / "allot")


class RunningStack:
    def __init__(self, state_dir: Path, env: dict[str, str]) -> None:
        self.state_dir = state_dir
        self.env = env

    def run(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([ALLOT, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"allot {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def stack(self) -> dict[str, Any]:
        return dict(json.loads((self.state_dir / "stack.json").read_text()))

    def pid(self, name: str) -> int:
        return int(self.stack()["processes"][name]["pid"])

    def events(self, event_type: str | None = None) -> list[Any]:
        async def read() -> list[Any]:
            store = PostgresEventStore.connect(self.env["ALLOT_DATABASE_URL"])
            try:
                return [r async for r in store.iterate(types=[event_type] if event_type else None)]
            finally:
                await store.close()

        return asyncio.run(read())

    def pods(self) -> dict[str, dict[str, Any]]:
        pods = json.loads(self.run("get", "pods", "-o", "json").stdout)["items"]
        return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["status"] for p in pods}

    def wait_for(self, predicate: Any, *, timeout: float = 90, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.3)
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted((self.state_dir / "logs").glob("*.log"))
        )
        raise AssertionError(f"timed out waiting for {what}\n{logs}")


@pytest.fixture
def running_stack(tmp_path, database_url, nats_server_url, bus_names) -> Iterator[RunningStack]:
    state_dir = tmp_path / "stack"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env.update(
        {
            "ALLOT_DATABASE_URL": database_url,
            "ALLOT_NATS_URL": nats_server_url,
            "ALLOT_NATS_PREFIX": bus_names["prefix"],
            "ALLOT_NATS_STREAM": bus_names["stream"],
            "ALLOT_STATE_DIR": str(state_dir),
            "ALLOT_FAILPOINT_STATE": str(tmp_path / "failpoints.fired"),
        }
    )
    stack = RunningStack(state_dir, env)
    yield stack
    stack.run("down", check=False)
