"""binder process: wiring only.

``ALLOT_KUBE_MODE`` sets the processor's ``mode``; Kubernetes mode adds two IO workers next to the processor's
consumer: the one that POSTs Bindings and patches ElasticQuota status (``adapters/kube.py``), and the one that writes
Events, ``PodScheduled`` conditions, PodGroup status and node device capacity (``adapters/notices.py``).
"""

import os

from allot_runtime.entry import service_main
from binder.observe import latency_metrics, observe_binding
from binder.processor import Binder


def main() -> None:
    mode = os.environ.get("ALLOT_KUBE_MODE") or "standalone"

    extras = []
    if mode == "kubernetes":
        from binder.adapters.kube import bind_worker
        from binder.adapters.notices import notice_worker

        extras += [bind_worker, notice_worker]
    service_main(
        "binder",
        Binder,
        prepare=lambda config: {**config, "mode": mode},
        extras=extras,
        observers=[observe_binding],
        collectors=[latency_metrics],
    )
