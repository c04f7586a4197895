"""Every service's projection survives a snapshot exactly: export at several cut points of rich logs, restore into a
processor built afresh from the same configuration, and both go on to the same decisions and the same digest."""

from __future__ import annotations

import pytest

from allot_stack.pipeline import SERVICES
from allot_testing.snapshots import OPENB, check_restores


@pytest.mark.parametrize("service", SERVICES)
def test_a_restored_projection_decides_as_the_original(service: str) -> None:
    if not OPENB.is_dir():
        pytest.skip(f"the openb trace is not at {OPENB}")
    assert check_restores(service) >= 20
