"""Database URLs: accept what users write (``postgresql://…``, ``postgres://…``) and hand SQLAlchemy what it needs."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def async_url(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {redact(url)!r} (expected postgresql://user@host:port/database)")


def address_problem(url: str) -> str | None:
    """Why the hosts and ports of a PostgreSQL ``url`` cannot be connected to, or None. libpq's forms are taken: one
    or more ``host[:port]`` separated by commas, IPv6 addresses in brackets, no host at all (a local socket, or
    ``?host=``); each port is 1 to 65535 in ASCII digits."""
    try:
        netloc = urlsplit(url).netloc if "://" in url else ""
    except ValueError:  # urlsplit's "Invalid IPv6 URL"
        return "a host that opens '[' (an IPv6 address) does not close it with ']'"
    hosts = netloc.rpartition("@")[2]
    if not hosts:
        return None
    for item in hosts.split(","):
        host, port = item, ""
        if item.startswith("["):
            host, bracket, rest = item.partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                return f"{item!r} is not a host: an IPv6 address is written [address] or [address]:port"
            port = rest[1:]
        elif ":" in item:
            host, _, port = item.rpartition(":")
        if ":" in host and not host.startswith("["):
            return f"{item!r} is not host:port (an IPv6 address is written in brackets, e.g. [::1])"
        if port and not (len(port) <= 5 and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            return f"port {port!r} of {item!r} is not a port from 1 to 65535"
    return None


def plain_url(url: str) -> str:
    """The libpq form (``postgresql://``), e.g. for asyncpg.connect or psql."""
    return "postgresql://" + async_url(url)[len("postgresql+asyncpg://") :]


def redact(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:  # a URL urlsplit cannot read: hide whatever precedes the host
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))
