"""docs/deploy.md and docs/install.md point at files that exist: moving an artefact must not leave a guide pointing
nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDES = [DOCS / "deploy.md", DOCS / "install.md"]


@pytest.mark.parametrize("doc", GUIDES, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text()
    links = [
        target.split("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("http://", "https://", "#"))
    ]
    assert links, "the guide links to the artefacts it describes"
    assert [link for link in links if not (doc.parent / link).exists()] == []


@pytest.mark.parametrize("doc", GUIDES, ids=lambda p: p.name)
def test_anchors_resolve(doc: Path) -> None:
    text = doc.read_text()
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    }
    anchors = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert anchors - headings == set()


def test_install_links_into_the_other_guides_resolve() -> None:
    """install.md's links to a section of another guide name a heading of that guide."""
    text = (DOCS / "install.md").read_text()
    for target, anchor in re.findall(r"\]\(([\w-]+\.md)#([^)]+)\)", text):
        headings = {
            re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", (DOCS / target).read_text(), flags=re.MULTILINE)
        }
        assert anchor in headings, f"{target}#{anchor}"
