"""``allot replay --verify`` runs with the garbage collector set to collect seldom, and gives it back as it was."""

from __future__ import annotations

import gc

from allot_audit.verify_jobs import COLLECT_EVERY, seldom_collected


def test_the_collector_is_seldom_while_verifying_and_restored_after() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    with seldom_collected():
        assert gc.get_threshold() == COLLECT_EVERY
        assert gc.get_freeze_count() >= frozen
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_it_is_restored_when_the_verification_fails() -> None:
    before = gc.get_threshold()
    try:
        with seldom_collected():
            raise RuntimeError("a failed read")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
