"""``allot replay --verify --jobs N``: the services split into N shares of about equal cost, each verified in one
pass by one process; the calling process's share is lighter by the chain it also checks."""

from __future__ import annotations

from allot_audit.verify_jobs import CHAIN_COST, COST, OTHER, Service, split

GROUPS = [
    Service("device-allocator", ("device-allocator",)),
    Service("quota-manager", ("quota-manager",)),
    Service("qos-enforcer", ("qos-enforcer@n1", "qos-enforcer@n2")),
    Service("binder", ("binder",)),
    Service("custom", ("custom",)),
]


def _cost(share: Service) -> float:
    return sum(COST.get(name, OTHER) for name in share.service.split("+"))


def test_every_instance_is_in_exactly_one_share() -> None:
    for jobs in (1, 2, 3, 8):
        shares = split(GROUPS, jobs)
        assert len(shares) == jobs
        instances = [name for share in shares for name in share.instances]
        assert sorted(instances) == sorted(name for group in GROUPS for name in group.instances)


def test_one_job_is_one_pass_over_every_service() -> None:
    (share,) = split(GROUPS, 1)
    assert set(share.service.split("+")) == {group.service for group in GROUPS}


def test_the_shares_are_balanced_the_chain_counted_in_the_first() -> None:
    mine, theirs = split(GROUPS, 2)
    assert theirs.service.startswith("device-allocator")  # the most expensive goes where nothing is yet
    loads = [_cost(mine) + CHAIN_COST, _cost(theirs)]
    heaviest = max(COST.get(group.service, OTHER) for group in GROUPS)
    assert abs(loads[0] - loads[1]) <= heaviest


def test_more_jobs_than_services_leave_shares_empty() -> None:
    shares = split(GROUPS[:1], 3)
    assert [share.instances for share in shares] == [(), ("device-allocator",), ()]
