"""reservation-manager holds to the processor contract (docs/adr/0012-processor-contract.md) over the reservation
and descheduling examples."""

from __future__ import annotations

from allot_testing.processor_contract import ProcessorContract
from reservation_manager.processor import ReservationManager


class TestReservationManagerContract(ProcessorContract):
    processor = ReservationManager
    workload = (
        "examples/reservation/01-reserve-for-owner.yaml",
        "examples/reservation/02-migrate-reservation-first.yaml",
    )
    bad_config = {"nope": 1}
    bad_field = "nope"
