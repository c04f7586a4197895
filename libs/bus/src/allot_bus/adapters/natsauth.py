"""How Allot's processes authenticate to NATS and secure the connection: settings, checks, and the driver's options.

=========================== ================================================================================
Environment variable        Meaning
=========================== ================================================================================
ALLOT_NATS_URL              ``nats://host:4222``, or ``tls://host:4222`` for TLS; credentials may be in it:
                            ``nats://user:password@host:4222``
ALLOT_NATS_USER             user name (with ALLOT_NATS_PASSWORD), instead of credentials in the URL
ALLOT_NATS_PASSWORD         the user's password
ALLOT_NATS_TOKEN            a token (``authorization { token: ... }``), instead of a user and password
ALLOT_NATS_TLS_CA           PEM file of the CA(s) that signed the server's certificate (needs ``tls://``)
ALLOT_NATS_TLS_CERT         PEM client certificate, for servers that verify clients (``verify: true``)
ALLOT_NATS_TLS_KEY          the client certificate's private key (PEM)
=========================== ================================================================================

Each is checked before anything connects: a problem is an :class:`~allot_contracts.errors.InvalidInput` naming the
variable (for the URL: where it came from, ``url_from``, which for a command may be the dev stack's ``stack.json``).
A server that refuses the credentials or the TLS handshake is reported the same way, at once, instead of being
retried forever (see :func:`allot_bus.adapters.nats.connect`). A server that does not answer (or JetStream
that cannot be used) is a :class:`NatsUnavailable`, so that a command's hint names where the NATS URL came from
(ALLOT_NATS_URL, or the dev stack's ``stack.json``), not the log's setting.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlsplit

import msgspec

from allot_contracts.errors import InvalidInput, Unavailable
from allot_eventstore.urls import address_problem, redact

SCHEMES = ("nats", "tls")
URL_VARIABLE = "ALLOT_NATS_URL"


class NatsAuth(msgspec.Struct, frozen=True, kw_only=True):
    """Credentials and TLS files for the NATS connection; empty fields are not used."""

    user: str = ""
    password: str = ""
    token: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""


# NatsAuth field → environment variable.
ENVIRONMENT = {
    "user": "ALLOT_NATS_USER",
    "password": "ALLOT_NATS_PASSWORD",
    "token": "ALLOT_NATS_TOKEN",
    "tls_ca": "ALLOT_NATS_TLS_CA",
    "tls_cert": "ALLOT_NATS_TLS_CERT",
    "tls_key": "ALLOT_NATS_TLS_KEY",
}


def from_env(environ: Mapping[str, str] | None = None) -> NatsAuth:
    env = os.environ if environ is None else environ
    return NatsAuth(**{field: env.get(var, "") for field, var in ENVIRONMENT.items()})


def problems(auth: NatsAuth, url: str, *, url_from: str = URL_VARIABLE) -> list[tuple[str, str]]:
    """Everything wrong with ``url`` (taken from ``url_from``: the variable, or the dev stack's ``stack.json``) and
    ``auth`` together, as ``(setting, reason)``; empty when they can be used."""
    issues: list[tuple[str, str]] = []
    if (unusable := address_problem(url)) is not None:  # a port that is not one, an IPv6 host not closed
        return [(url_from, f"{unusable} in {redact(url)!r}")]
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or not parts.hostname:
        issues.append((url_from, f"{redact(url)!r} is not nats://host:port or tls://host:port"))
        return issues
    in_url = bool(parts.username or parts.password)
    if auth.user and not auth.password:
        issues.append(("ALLOT_NATS_PASSWORD", "is required with ALLOT_NATS_USER"))
    if auth.password and not auth.user:
        issues.append(("ALLOT_NATS_USER", "is required with ALLOT_NATS_PASSWORD"))
    if in_url and (auth.user or auth.token):
        issues.append(
            (
                url_from,
                "holds credentials and so does ALLOT_NATS_USER or ALLOT_NATS_TOKEN: give them once",
            )
        )
    if auth.token and auth.user:
        issues.append(
            ("ALLOT_NATS_TOKEN", "and ALLOT_NATS_USER are both set: a server takes one or the other")
        )
    for field in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(auth, field)
        if path and not Path(path).is_file():
            issues.append((ENVIRONMENT[field], f"{path} is not a readable file"))
    if bool(auth.tls_cert) != bool(auth.tls_key):
        issues.append(
            ("ALLOT_NATS_TLS_CERT", "and ALLOT_NATS_TLS_KEY go together (a client certificate and its key)")
        )
    if (auth.tls_ca or auth.tls_cert) and parts.scheme != "tls":
        issues.append(
            (
                url_from,
                f"is {parts.scheme}:// but TLS files are set: use tls://{parts.hostname}:{parts.port or 4222} so the "
                "connection cannot fall back to plain text",
            )
        )
    return issues


def tls_context(auth: NatsAuth) -> ssl.SSLContext:
    """The client's TLS context: the system's CAs, or ALLOT_NATS_TLS_CA's; the client certificate when given."""
    try:
        context = ssl.create_default_context(cafile=auth.tls_ca or None)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidInput([("ALLOT_NATS_TLS_CA", f"{auth.tls_ca} is not a PEM CA bundle: {exc}")]) from exc
    if auth.tls_cert:
        try:
            context.load_cert_chain(auth.tls_cert, auth.tls_key)
        except (ssl.SSLError, OSError) as exc:
            raise InvalidInput(
                [
                    (
                        "ALLOT_NATS_TLS_CERT",
                        f"{auth.tls_cert} with {auth.tls_key} is not a PEM certificate and key: {exc}",
                    )
                ]
            ) from exc
    return context


class NatsUnavailable(Unavailable):
    """NATS (at ALLOT_NATS_URL, or the dev stack's) did not answer, or its JetStream could not be used: worth a
    retry, and not the event log's fault. Here rather than in :mod:`allot_bus.adapters.nats` so that the CLI can tell
    it apart when a command fails without importing the NATS driver."""


class AuthOptions(TypedDict, total=False):
    """The ``nats.connect`` keyword arguments that authenticate and encrypt the connection."""

    user: str
    password: str
    token: str
    tls: ssl.SSLContext
    tls_hostname: str | None


def connect_options(auth: NatsAuth, url: str, *, url_from: str = URL_VARIABLE) -> AuthOptions:
    """The ``nats.connect`` keyword arguments for ``auth`` (checked first: raises InvalidInput naming ``url_from``
    for a problem of the URL)."""
    issues = problems(auth, url, url_from=url_from)
    if issues:
        raise InvalidInput(issues, subject="NATS connection settings")
    options: AuthOptions = {}
    if auth.user:
        options["user"], options["password"] = auth.user, auth.password
    if auth.token:
        options["token"] = auth.token
    if urlsplit(url).scheme == "tls":
        options["tls"] = tls_context(auth)
        options["tls_hostname"] = urlsplit(url).hostname
    return options


def refusal(
    exc: BaseException, auth: NatsAuth, url: str, *, url_from: str = URL_VARIABLE
) -> InvalidInput | None:
    """The server refused us for good (credentials or TLS handshake): the error to raise, naming what to fix (for the
    URL: ``url_from``, the variable or the dev stack's ``stack.json`` it came from). None for anything a retry may
    cure (a server not up yet, a lost connection)."""
    text = str(exc)
    where = f"NATS at {redact(url)}"
    if "authorization violation" in text.lower() or "authentication" in text.lower():
        if auth.user:
            field, hint = "ALLOT_NATS_USER", "the server refused ALLOT_NATS_USER / ALLOT_NATS_PASSWORD"
        elif auth.token:
            field, hint = "ALLOT_NATS_TOKEN", "the server refused ALLOT_NATS_TOKEN"
        elif urlsplit(url).username:
            field, hint = url_from, f"the server refused the user and password in {url_from}"
        else:
            field, hint = (
                url_from,
                "the server requires authentication and none is configured (set ALLOT_NATS_USER and "
                "ALLOT_NATS_PASSWORD, or nats://user:password@host:port)",
            )
        return InvalidInput([(field, f"{hint}: {text.strip() or type(exc).__name__}")], subject=where)
    if isinstance(exc, ssl.SSLError):
        if urlsplit(url).scheme != "tls":  # the server asked for TLS; the driver tried with the system's CAs
            reason = f"the server requires TLS: use tls://host:port, with ALLOT_NATS_TLS_CA for a private CA ({exc})"
            return InvalidInput([(url_from, reason)], subject=where)
        field = "ALLOT_NATS_TLS_CA" if isinstance(exc, ssl.SSLCertVerificationError) else url_from
        return InvalidInput([(field, f"the TLS handshake failed: {exc}")], subject=where)
    return None
