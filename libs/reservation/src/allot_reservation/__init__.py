"""Reservations and PodMigrationJobs, pure: owner matching, the Reservation lifecycle, migration arbitration and the
migration state machine (reservation-manager's decisions). User-facing behaviour: docs/reservation.md."""

from allot_reservation.config import ConfigError, MigrationConfig, ReservationConfig
from allot_reservation.engine import INTERESTS, NAME, ReservationEngine
from allot_reservation.match import PodFacts, exact_match, match_reservation, owner_matches, owners_match

__all__ = [
    "INTERESTS",
    "NAME",
    "ConfigError",
    "MigrationConfig",
    "PodFacts",
    "ReservationConfig",
    "ReservationEngine",
    "exact_match",
    "match_reservation",
    "owner_matches",
    "owners_match",
]
