"""What the relay reads besides the shared ``ALLOT_*`` settings: how it seals the log (docs/security.md).

Kept apart from :mod:`allot_relay.main` so that the CLI (``allot replay --verify``, the dev stack) can name these
settings without importing the server.
"""

from __future__ import annotations

ENVIRONMENT = ("ALLOT_ANCHOR_KEY_FILE", "ALLOT_ANCHOR_EVERY_EVENTS", "ALLOT_ANCHOR_EVERY_SECONDS")


class AnchorSettingsError(Exception):
    """An anchor setting the relay cannot use (an unreadable key file, a bad checkpoint interval): fix it, restart."""
