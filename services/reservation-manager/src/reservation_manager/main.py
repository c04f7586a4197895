"""reservation-manager process: wiring only."""

from allot_runtime.entry import service_main
from reservation_manager.processor import ReservationManager


def main() -> None:
    service_main("reservation-manager", ReservationManager)
