"""Database URLs: accept what users write (``postgresql://…``, ``postgres://…``) and hand SQLAlchemy what it needs."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def async_url(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {redact(url)!r} (expected postgresql://user@host:port/database)")


def plain_url(url: str) -> str:
    """The libpq form (``postgresql://``), e.g. for asyncpg.connect or psql."""
    return "postgresql://" + async_url(url)[len("postgresql+asyncpg://") :]


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))
