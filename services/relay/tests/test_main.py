"""The relay's process surface: ``allot-relay`` refuses what it cannot use with one clear line and exit code 2, as the
services do, and ``allot relay`` (the CLI's wrapper) reports a refused anchor key as refused input (exit code 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from allot_eventstore.postgres import PostgresEventStore
from allot_relay.main import sealer
from allot_relay.settings import AnchorSettingsError

BIN = Path(sys.executable).parent


def test_the_relay_refuses_a_key_file_it_cannot_use(tmp_path: Path) -> None:
    bad = tmp_path / "anchor.key"
    bad.write_text("-----BEGIN NOTHING-----\n")
    store = PostgresEventStore.connect("postgresql://nowhere/allot")
    with pytest.raises(AnchorSettingsError, match=r"anchor\.key"):
        sealer(store, {"ALLOT_ANCHOR_KEY_FILE": str(bad)})
    assert sealer(store, {}) is None


def test_allot_relay_without_a_database_stops_at_its_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ALLOT_DATABASE_URL"}
    result = subprocess.run([str(BIN / "allot-relay")], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "allot-relay: invalid configuration: ALLOT_DATABASE_URL: is required (e.g. postgresql://user@host:5432/allot)"
    )
