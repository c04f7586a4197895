"""docs/kubernetes.md's table "which decisions are enacted how" names the same decisions and outcomes as the ledger
that judges them (``allot_cli.kube.ledger.RULES``): a decision enacted in code but missing from the table, or a row
the code does not judge, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from allot_cli.kube.ledger import RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
NAME = re.compile(r"`([a-z]+\.[a-z_]+)`")
SHORT = re.compile(r"`([a-z_]+)`")  # the "running" of "`migration.pending` / `running`": the same prefix


def table() -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("| Decision (decider) | API call | Enacted | Enactment failed | Component")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def decisions(cell: str) -> set[str]:
    """The decision types a row's first cell names: ``a.b`` and the ``c`` of ``a.b / c`` (same prefix); links and
    parenthesised remarks are not read."""
    text = re.sub(r"\([^()]*\)", "", re.sub(r"\[[^\]]*\]\([^)]*\)", "", cell))
    out: set[str] = set()
    prefix = ""
    for part in re.split(r"\s*/\s*|,\s*", text):
        part = part.strip()
        if full := NAME.match(part):
            out.add(full.group(1))
            prefix = full.group(1).split(".")[0]
        elif (short := SHORT.match(part)) and prefix:
            out.add(f"{prefix}.{short.group(1)}")
    return out


def test_every_enacted_decision_has_its_row_and_every_row_is_judged() -> None:
    documented: dict[str, set[str]] = {}
    for decision_cell, _call, enacted, failed, component in table():
        assert component, f"row {decision_cell}: no component"
        outcomes = set(NAME.findall(enacted)) | set(NAME.findall(failed.split(";")[0]))
        for kind in decisions(decision_cell):
            documented[kind] = outcomes
    assert set(documented) == set(RULES), (
        f"documented only: {sorted(set(documented) - set(RULES))}; "
        f"in code only: {sorted(set(RULES) - set(documented))}"
    )
    for kind, rule in RULES.items():
        assert documented[kind] == set(rule.outcomes), kind
