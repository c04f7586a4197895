"""``python -m allot_kube_sync``: the same process as ``allot-kube-sync``."""

from allot_kube_sync.main import main

main()
