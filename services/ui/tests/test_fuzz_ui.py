"""Fuzzing the web view's query strings: the real server (``allot ui``'s, with its limits) on a real socket, over the
simulator's recorded log, asked every page with parameters it takes and does not take, repeated, empty, huge,
negative, non-ASCII, with control characters, and raw query strings. Every answer: no 5xx, no traceback logged,
``nosniff``, within the timeout; a refusal (400) names the parameter (``query.<name>:``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from allot_testing import demo, fuzz
from allot_testing.http_fuzz import Answer, Client, Tracebacks, served
from allot_ui.model import UiModel
from allot_ui.pages import PHASES
from allot_ui.query import PARAMETERS
from allot_ui.server import LIMITS, serve

PAGES = ["/", "/gpus", "/pods", "/quotas", "/gangs", "/reservations", "/events", "/verify", "/api/summary"]
PAGES += ["/api/stream", "/healthz", "/readyz", "/pods/research/train-llama-0", "/pods/x/y"]
NAMES = sorted({name for taken in PARAMETERS.values() for name in taken} | {"x", "", "after[]", "limit "})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.demo_store(tmp_path_factory.mktemp("ui"))


values = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["", "0", "1", "Bound", "Pending", "research", "abc", "1e3", "0x10", " 1", "１２"]),
    st.text(max_size=40),
    st.text(min_size=250, max_size=300),
)
pairs = st.lists(st.tuples(st.sampled_from(NAMES) | st.text(max_size=10), values), max_size=5)
raw = st.text(max_size=60).map(lambda text: quote(text, safe="=&;%+?/"))


plain = st.text(st.characters(min_codepoint=32, exclude_characters="\x7f"), max_size=30)
VALID = {  # values each parameter takes
    "phase": st.sampled_from(PHASES),
    "namespace": plain,
    "node": plain,
    "q": plain,
    "limit": st.integers(1, 10_000).map(str),
    "after": st.integers(0, 2**63 - 1).map(str),
}


def requests(page: str) -> st.SearchStrategy[tuple[str, str]]:
    """A page and a query string: its own parameters with values they take or any, anyone's, or raw text."""
    taken = sorted(PARAMETERS.get(page, {}))
    if not taken:
        return st.tuples(st.just(page), st.one_of(st.just(""), pairs.map(urlencode), raw))
    valid = st.fixed_dictionaries({}, optional={name: VALID[name] for name in taken})
    own = st.dictionaries(st.sampled_from(taken), values, max_size=len(taken))
    return st.tuples(
        st.just(page), st.one_of(valid.map(urlencode), own.map(urlencode), pairs.map(urlencode), raw)
    )


def check(answer: Answer, tally: fuzz.Tally) -> None:
    assert answer.status < 500, answer
    assert answer.seconds < LIMITS.header_timeout + LIMITS.body_timeout, answer
    assert answer.headers.get("x-content-type-options") == "nosniff", answer
    if answer.status == 400:
        message = json.loads(answer.body)["message"]
        # a parameter refused, or a request line longer than the server reads
        assert message.startswith(("query.", "not an HTTP request Allot reads: ")) and ": " in message, (
            message
        )
    else:
        assert answer.status in (200, 404), answer
    tally.count(str(answer.status))


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_the_web_view_answers_every_query_without_a_5xx(examples: int, store: Any) -> None:
    tally = fuzz.Tally("web view queries")
    with Tracebacks().watching() as logged, served(lambda: serve(UiModel(store), "127.0.0.1", 0)) as port:
        client = Client(port)

        def case(request: tuple[str, str]) -> None:
            page, query = request
            check(client.request("GET", f"{page}?{query}" if query else page), tally)
            assert not logged.records, logged.lines()

        cases: Callable[[], None] = fuzz.settings_for(examples)(
            given(st.sampled_from(PAGES).flatmap(requests))(case)
        )
        try:
            cases()
        finally:
            client.close()
