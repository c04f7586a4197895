"""reservation-manager process: wiring only. ``ALLOT_KUBE_MODE`` sets how an eviction is carried out (standalone:
delete and re-submit the pod; kubernetes: the binder calls the Eviction API) and, in Kubernetes mode, adds the worker
that writes Reservation and PodMigrationJob status back (``adapters/kube.py``)."""

import os

from allot_runtime.entry import service_main
from reservation_manager.processor import ReservationManager


def main() -> None:
    mode = os.environ.get("ALLOT_KUBE_MODE") or "standalone"

    extras = []
    if mode == "kubernetes":
        from reservation_manager.adapters.kube import status_worker

        extras.append(status_worker)
    service_main(
        "reservation-manager",
        ReservationManager,
        prepare=lambda config: {**config, "mode": config.get("mode", mode)},
        extras=extras,
    )
