"""The satisfaction predicate per match policy, on counts and on gangs.

Responsibility: decide whether a gang is satisfied, in two situations:

- *before* an attempt (``ready``): could the gang go forward if its pending members were placed now? Pending and
  held members count as "waiting".
- *after* a placement (``satisfied_after_placement``): with the members just placed (and any held), is the gang
  satisfied so that its group can be admitted? Placed and held members count as "waiting".

The rule itself (``is_satisfied``), as upstream Permit evaluates it:

    only-waiting:         waiting >= min-available
    waiting-and-running:  waiting + running >= min-available     (running = admitted or bound members)
    once-satisfied:       waiting >= min-available, or the gang was satisfied once (any member ever bound)

``once-satisfied`` is also the meaning of any unset policy (the configured default applies at declaration).
Bound members stay counted as "running" until they are deleted, whatever their pod phase, as upstream does.
Pure functions over counts; no state is changed here.
"""

from __future__ import annotations

from ._keys import ONCE_SATISFIED, ONLY_WAITING, WAITING_AND_RUNNING
from .state import ADMITTED, ATTEMPTING, BOUND, HELD, PENDING, Gang

__all__ = ["is_satisfied", "ready", "satisfied_after_placement"]


def is_satisfied(
    *, policy: str, min_available: int, waiting: int, running: int, once_satisfied: bool
) -> bool:
    """The predicate on counts (see the module docstring)."""
    if policy == ONLY_WAITING:
        return waiting >= min_available
    if policy == WAITING_AND_RUNNING:
        return waiting + running >= min_available
    assert policy == ONCE_SATISFIED, policy
    return once_satisfied or waiting >= min_available


def ready(gang: Gang) -> bool:
    """Whether ``gang`` lets its group be attempted now (pending members counted as if placed)."""
    return _satisfied(gang, waiting=gang.count(PENDING, HELD))


def satisfied_after_placement(gang: Gang) -> bool:
    """Whether ``gang`` is satisfied once its attempting members are placed (held members included)."""
    return _satisfied(gang, waiting=gang.count(ATTEMPTING, HELD))


def _satisfied(gang: Gang, *, waiting: int) -> bool:
    """Whether ``gang``'s match policy holds with ``waiting`` members counted as waiting (and its admitted and bound
    members as running); a gang not yet declared never is."""
    if gang.settings is None:
        return False
    return is_satisfied(
        policy=gang.settings.match_policy,
        min_available=gang.settings.min_available,
        waiting=waiting,
        running=gang.count(ADMITTED, BOUND),
        once_satisfied=gang.once_satisfied,
    )
