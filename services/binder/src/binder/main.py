"""binder process: wiring only.

``ALLOT_KUBE_MODE`` sets the processor's ``mode``; Kubernetes mode adds the IO worker that POSTs Bindings and
patches ElasticQuota status (``adapters/kube.py``) as an extra task next to the processor's consumer.
"""

import os
from typing import Any

from allot_runtime.entry import service_main
from binder.processor import Binder


def main() -> None:
    mode = os.environ.get("ALLOT_KUBE_MODE") or "standalone"

    def build(config: dict[str, Any]) -> Binder:
        return Binder({**config, "mode": mode})

    extras = []
    if mode == "kubernetes":
        from binder.adapters.kube import bind_worker

        extras.append(bind_worker)
    service_main("binder", build, extras=extras)
