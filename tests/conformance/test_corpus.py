"""Every conformance case reaches the outcome upstream produces, in the simulator (tests/conformance/README.md)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from allot_testing.conformance import cases, check_expected, simulate

CORPUS = Path(__file__).resolve().parent
CASES = cases(CORPUS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_reaches_the_upstream_outcome_in_the_simulator(case) -> None:
    _, outcome = simulate(case)
    problems = check_expected(case, outcome)
    assert not problems, f"{case.name} ({case.expected['source']}):\n  " + "\n  ".join(problems)


def test_every_scenario_has_an_expected_file_and_every_expected_file_a_scenario() -> None:
    scenarios = {
        p.with_suffix("")
        for p in CORPUS.rglob("*.yaml")
        if not p.name.endswith((".expected.yaml", ".config.yaml"))
    }
    expected = {p.with_name(p.name.removesuffix(".expected.yaml")) for p in CORPUS.rglob("*.expected.yaml")}
    assert scenarios == expected


def test_cases_cover_every_feature() -> None:
    per_feature = Counter(c.path.parent.name for c in CASES)
    assert set(per_feature) <= {
        "devices",
        "numa-cpu",
        "quota",
        "gang",
        "reservation",
        "migration",
        "lownodeload",
        "loadaware",
        "overcommit",
        "cpu-normalization",
        "qos-priority",
        "colocation-profile",
    }


def _anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return out


def test_every_difference_links_an_entry_that_exists() -> None:
    """A case where Allot deliberately differs from upstream names the docs' entry that says so and why."""
    repo = CORPUS.parents[1]
    index = (repo / "docs" / "differences.md").read_text()
    linked = 0
    for case in CASES:
        link = case.expected.get("difference")
        if not link:
            continue
        linked += 1
        path, _, anchor = str(link).split()[0].partition("#")
        assert (repo / path).is_file(), f"{case.name}: {link}"
        assert anchor in _anchors((repo / path).read_text()), (
            f"{case.name}: no heading for #{anchor} in {path}"
        )
        assert f"({Path(path).name}#{anchor})" in index, (
            f"{case.name}: docs/differences.md does not list {link}"
        )
    assert linked, "the corpus states where Allot differs"
