"""A candidate that won its Lease but could not record the term in the log (PostgreSQL did not answer) records the
same term again on its next round, renewing the lease it still holds; one whose lease was taken meanwhile does not.
Against the fake API server and a real PostgreSQL; the candidate's monotonic clock stands still, so a lease never
lapses by time here (a candidate that waited for its own lease to lapse would wait for ever)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from allot_eventstore import Fence
from allot_eventstore.pg_errors import LogUnavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.kube.lease import Leadership, LeaseConfig
from allot_testing.fake_kube import FakeKube

pytestmark = pytest.mark.integration

LEASE = ("Lease", "allot-binder", "allot-system")
LEASE_PATH = r"/leases/allot-binder$"
NO_ANSWER = "PostgreSQL unavailable: no answer within 11 s (timed out)"


class FailingOnce:
    """The log, whose first ``advance_fence`` or first append (``fails``) gets no answer; ``then`` runs before that
    failure is raised."""

    def __init__(
        self, store: PostgresEventStore, fails: str, then: Callable[[], None] = lambda: None
    ) -> None:
        self._store = store
        self._fails = fails
        self._then = then
        self.terms: list[int] = []  # of each advance_fence asked for

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _fail_now(self, method: str) -> bool:
        if self._fails != method:
            return False
        self._fails = ""
        self._then()
        return True

    async def advance_fence(self, fence: Fence, *, holder: str) -> tuple[int, str]:
        self.terms.append(fence.term)
        if self._fail_now("advance_fence"):
            raise LogUnavailable(NO_ANSWER)
        return await self._store.advance_fence(fence, holder=holder)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        if self._fail_now("append"):
            raise LogUnavailable(NO_ANSWER)
        return await self._store.append(*args, **kwargs)


async def candidate(kube: FakeKube, tmp_path: Any, log: FailingOnce, identity: str) -> Leadership:
    from allot_runtime.kube import api_client

    config = LeaseConfig(
        namespace="allot-system",
        name="allot-binder",
        identity=identity,
        lease_duration=30.0,
        renew_deadline=20.0,
        retry_period=0.01,
    )
    client = await api_client(kube.kubeconfig(tmp_path))
    return Leadership(client=client, store=log, config=config, decider="binder", monotonic=lambda: 1000.0)  # type: ignore[arg-type]


async def elected_terms(store: PostgresEventStore) -> list[int]:
    return [json.loads(r.payload)["term"] async for r in store.iterate(types={"leader.elected"})]


@pytest.mark.parametrize("fails", ["advance_fence", "append"], ids=["the-term", "leader-elected"])
async def test_a_failed_term_record_is_made_again_for_the_same_term_on_the_next_round(
    kube: FakeKube, tmp_path: Any, store: PostgresEventStore, fails: str
) -> None:
    log = FailingOnce(store, fails)
    leader = await candidate(kube, tmp_path, log, "a")
    try:
        # was: the term given up, the candidate following its own lease until it lapsed (never, by this clock)
        assert await asyncio.wait_for(leader.acquire(asyncio.Event()), timeout=10)
        assert (leader.term, leader.valid()) == (1, True)
        assert log.terms == [1, 1]  # the same term, recorded again; no other term was taken
        assert await store.advance_fence(Fence("binder", 0), holder="x") == (1, "a")
        assert await elected_terms(store) == [1]
        lease = kube.get(*LEASE)
        assert lease is not None
        assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("a", 0)
        assert kube.count("PUT", LEASE_PATH) >= 1  # the lease renewed while the record was made again
    finally:
        await leader.client.close()


async def test_a_candidate_whose_lease_was_taken_while_its_record_failed_does_not_record_that_term(
    kube: FakeKube, tmp_path: Any, store: PostgresEventStore, eventually: Any
) -> None:
    def taken_by_b() -> None:
        def take(lease: dict[str, Any]) -> None:
            lease["spec"].update(holderIdentity="b", leaseTransitions=1)

        kube.update(*LEASE[:2], take, LEASE[2])

    log = FailingOnce(store, "advance_fence", then=taken_by_b)
    leader = await candidate(kube, tmp_path, log, "a")
    stop = asyncio.Event()
    acquiring = asyncio.create_task(leader.acquire(stop))
    try:
        await eventually(lambda: kube.count("GET", LEASE_PATH) >= 4, what="rounds after the failed record")
        stop.set()
        assert await asyncio.wait_for(acquiring, timeout=10) is False
        assert (leader.term, log.terms) == (0, [1])
        assert await elected_terms(store) == []
        lease = kube.get(*LEASE)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "b"
    finally:
        stop.set()
        await leader.client.close()
