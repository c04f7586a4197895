"""``python -m allot_webhook``: the same process as ``allot-webhook``."""

from allot_webhook.main import main

main()
