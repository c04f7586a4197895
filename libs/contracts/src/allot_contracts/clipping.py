"""Input repeated in an error message: quoted, and cut when long, so that a refusal names the value without echoing
megabytes of it. No imports: the command line's flag types use it before anything else is loaded."""

from __future__ import annotations

__all__ = ["clipped"]


def clipped(text: str, limit: int = 40) -> str:
    """``text`` quoted, its middle left out when it is long (an error message names it, not all of it)."""
    return repr(text) if len(text) <= limit else f"{text[:20]!r}...{text[-10:]!r} ({len(text)} characters)"
