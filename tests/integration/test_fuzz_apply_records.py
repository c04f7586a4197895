"""``allot apply --atomic`` against a real PostgreSQL with broken manifests (allot_testing.manifest_fuzz): a batch the
door refuses records nothing at all, not even its valid documents; a batch it accepts is recorded. A sample (the
door itself is fuzzed at full length in tests/unit/test_fuzz_manifests.py)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from allot_cli.commands.apply import cmd_apply
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.errors import UsageError
from allot_testing import fuzz
from allot_testing.builders import a_node
from allot_testing.manifest_fuzz import KindKey, as_yaml, manifests

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = {fuzz.DEFAULT: 12, fuzz.SLOW: 300}


async def _head(url: str) -> int:
    store = PostgresEventStore.connect(url)
    try:
        return (await store.head())[0]
    finally:
        await store.close()


def _apply(path: Path) -> int:
    args = argparse.Namespace(filename=[str(path)], atomic=True, no_wait=True, wait_each=False, timeout=5.0)
    try:
        return cmd_apply(args)
    except UsageError as exc:  # the project's refusal (a pod that exists already, an unreadable file)
        return exc.exit_code


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_refused_batch_records_nothing(
    examples: int, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    tally = fuzz.Tally("manifests (allot apply --atomic, PostgreSQL)")
    path = tmp_path / "batch.yaml"
    valid: list[dict[str, Any]] = [a_node("fuzz-n1"), a_node("fuzz-n2")]

    @settings(fuzz.settings_for(examples), max_examples=SAMPLE[examples])
    @given(manifests(ROOT))
    def check(case: tuple[KindKey, dict[str, Any], list[str]]) -> None:
        _, body, _ = case
        try:
            broken = as_yaml(body)
        except RecursionError:
            return
        path.write_text(yaml.safe_dump_all(valid) + "---\n" + broken)
        before = asyncio.run(_head(database_url))
        code = _apply(path)
        after = asyncio.run(_head(database_url))
        if code == 0:
            assert after > before, "an accepted batch is recorded"
            tally.count("accepted and recorded")
        else:
            assert code == 1 and after == before, "a refused batch records nothing"
            tally.count("refused, nothing recorded")

    check()
