"""Named groups of event types that services spread into their interests: each names types the catalogue records."""

from __future__ import annotations

from allot_contracts.events import ALL_EVENT_TYPES, PodDeleted, PodObserved, PodSubmitted, split_tag
from allot_contracts.events.cluster import INVENTORY_TYPES
from allot_contracts.events.inputs import POD_LIFE_TYPES


def test_every_group_names_recorded_event_types() -> None:
    for group in (INVENTORY_TYPES, POD_LIFE_TYPES):
        assert group <= set(ALL_EVENT_TYPES), sorted(group - set(ALL_EVENT_TYPES))


def test_a_pods_life_is_its_arrivals_and_its_deletion() -> None:
    tags = (cls.__struct_config__.tag for cls in (PodSubmitted, PodObserved, PodDeleted))
    assert {split_tag(tag)[0] for tag in tags if isinstance(tag, str)} == POD_LIFE_TYPES
