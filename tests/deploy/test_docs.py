"""docs/deploy.md points at files that exist: moving an artefact must not leave the guide pointing nowhere."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def test_relative_links_resolve() -> None:
    text = DOC.read_text()
    links = [
        target.split("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("http://", "https://", "#"))
    ]
    assert links, "the guide links to the artefacts it describes"
    assert [link for link in links if not (DOC.parent / link).exists()] == []


def test_anchors_resolve() -> None:
    text = DOC.read_text()
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    }
    anchors = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert anchors - headings == set()
