"""``allot replay --verify --expect-head``: a wrong expected head on an intact chain is not a broken chain."""

from __future__ import annotations

import asyncio

import pytest

from allot_audit.replay import chain_line
from allot_eventstore.verify import ChainReport, verify_chain
from allot_testing.builders import a_node, a_pod
from allot_testing.scenario import Scenario


def _verify(s: Scenario, expected: str | None) -> ChainReport:
    async def run() -> ChainReport:
        return await verify_chain(
            s.sim.store.iterate(), head=await s.sim.store.head(), expected_head=expected
        )

    return asyncio.run(run())


def test_an_intact_chain_with_another_head_than_expected_says_so_not_broken() -> None:
    s = Scenario()
    s.apply(a_node("n1", gpus=1), a_pod("a"))
    good = _verify(s, None)
    assert good.ok and chain_line(good).startswith("hash chain   ok:")
    assert _verify(s, good.head_hash).ok
    other = _verify(s, "0" * 64)
    assert not other.ok and other.head_unexpected  # still a failure (exit 1), but of another kind
    line = chain_line(other)
    assert "BROKEN" not in line and "intact" in line and "NOT the expected head" in line
    assert "intact" in other.problem and "0" * 64 in other.problem and "anchor" not in other.problem


def test_the_anchor_line_does_not_call_an_intact_chain_broken() -> None:
    import msgspec

    from allot_eventstore.anchor import AnchorReport
    from allot_stack.anchoring import anchor_line

    s = Scenario()
    s.apply(a_node("n1", gpus=1))
    anchor = AnchorReport(anchored=True, keys=["0aa6"], checkpoints=3, newest_position=2)
    other = msgspec.structs.replace(_verify(s, "0" * 64), anchor=anchor)
    assert anchor_line(other).startswith("anchor       ok: 3 signed checkpoint(s) match the chain")
    broken = msgspec.structs.replace(other, head_unexpected=False)
    assert "before it broke" in anchor_line(broken)


def test_the_live_check_gives_up_on_a_nats_that_does_not_answer_saying_why() -> None:
    """``replay --verify`` asks the running services over NATS: one that does not answer is given the request's
    timeout, then named, instead of a wait without end."""
    import time

    import pytest

    from allot_audit.replay import live_states
    from allot_bus.adapters.natsauth import NatsUnavailable
    from allot_bus.names import BusNames
    from allot_runtime.embedded import free_port
    from allot_stack.connect import Endpoints

    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    ep = Endpoints(database_url="postgresql://a@h/x", nats_url=url, names=BusNames())
    started = time.monotonic()
    with pytest.raises(NatsUnavailable, match=f"^cannot connect to NATS at {url} within 0.5 s: "):
        asyncio.run(live_states(ep, ["binder"], timeout=0.5))
    assert time.monotonic() - started < 5


def test_the_live_check_that_cannot_reach_nats_names_where_its_url_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line says what to check: ALLOT_NATS_URL when the URL came from it, else the dev stack's stack.json."""
    from allot_audit import replay
    from allot_bus.adapters.natsauth import NatsUnavailable
    from allot_bus.names import BusNames
    from allot_stack.connect import Endpoints

    async def unreachable(*_: object, **__: object) -> None:
        raise NatsUnavailable("cannot connect to NATS at nats://127.0.0.1:9 within 2 s: refused")

    monkeypatch.setattr(replay, "live_states", unreachable)
    for nats_from, hint in (
        ("ALLOT_NATS_URL", "(check ALLOT_NATS_URL)"),
        (
            "/s/.allot/stack.json",
            "(the URL is from /s/.allot/stack.json: check the dev stack with `allot status`)",
        ),
    ):
        ep = Endpoints(
            database_url="postgresql://a@h/x",
            nats_url="nats://127.0.0.1:9",
            names=BusNames(),
            nats_from=nats_from,
        )
        said: list[str] = []
        run = replay._Run(None, said.append, ep, None)  # type: ignore[arg-type]  # the live check reads neither
        assert asyncio.run(run.live()) == 0
        assert said == [
            f"live         cannot connect to NATS at nats://127.0.0.1:9 within 2 s: refused {hint}; compared the log "
            "with itself only"
        ]
