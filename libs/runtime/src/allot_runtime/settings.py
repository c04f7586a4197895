"""Service settings: typed, defaulted, read from the environment once (in ``main.py``) and passed down.

=========================== ============================== =========================================================
Environment variable        Default                        Meaning
=========================== ============================== =========================================================
ALLOT_DATABASE_URL          (required)                     PostgreSQL holding the event log
ALLOT_NATS_URL              nats://127.0.0.1:4222          NATS server with JetStream (``tls://`` for TLS; may hold
                                                           ``user:password@``)
ALLOT_NATS_USER             (none)                         NATS user, with ALLOT_NATS_PASSWORD
ALLOT_NATS_PASSWORD         (none)                         its password
ALLOT_NATS_TOKEN            (none)                         NATS token, instead of a user and password
ALLOT_NATS_TLS_CA           (system CAs)                   PEM CA bundle for the server's certificate (``tls://``)
ALLOT_NATS_TLS_CERT         (none)                         PEM client certificate (mutual TLS), with
ALLOT_NATS_TLS_KEY          (none)                         its key; see ``allot_bus.adapters.natsauth``
ALLOT_NATS_PREFIX           allot                          subject prefix (``<prefix>.events.>``)
ALLOT_NATS_STREAM           ALLOT_EVENTS                   JetStream stream name
ALLOT_HTTP_HOST             0.0.0.0                        health/metrics listener
ALLOT_HTTP_PORT             8080                           health/metrics port (0 = pick a free one)
ALLOT_LOG_LEVEL             INFO
ALLOT_LOG_FORMAT            json                           ``json`` or ``text``
ALLOT_OTEL_EXPORTER         none                           ``none``, ``console`` or ``otlp`` (OTEL_EXPORTER_OTLP_*)
ALLOT_CONFIG_FILE           (none)                         YAML/JSON file with the service's decision config
ALLOT_KUBE_MODE             standalone                     ``standalone`` or ``kubernetes`` (binder, node-reporter)
ALLOT_INSTANCE              (none)                         per-node instance (a DaemonSet pod sets its node name):
                                                           node-reporter and qos-enforcer then decide for that node
                                                           only, as ``<service>@<instance>``
ALLOT_LEADER_ELECTION       advisory                       ``advisory`` (a PostgreSQL advisory lock per consumer) or
                                                           ``lease`` (a Kubernetes Lease with a fencing term:
                                                           ``allot_runtime.kube.lease``)
ALLOT_LEASE_NAMESPACE       allot-system                   where the Lease is (the pod's namespace)
ALLOT_LEASE_NAME            allot-<service>                the Lease's name
ALLOT_LEASE_DURATION_S      15                             a follower takes over after this long without renewal
ALLOT_LEASE_RENEW_DEADLINE_S 10                            the leader stops writing after this long without renewal
ALLOT_LEASE_RETRY_PERIOD_S  2                              renewal / acquisition period
ALLOT_DB_READ_TIMEOUT       30                             seconds a read of the event log waits for PostgreSQL's
                                                           answer (an append: this plus its lock's 10 s); then it
                                                           fails, /readyz says not ready and it is retried (0: wait
                                                           for ever)
=========================== ============================== =========================================================
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from allot_bus.adapters import natsauth
from allot_bus.adapters.natsauth import NatsAuth
from allot_bus.names import BusNames
from allot_contracts.errors import InvalidInput
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_eventstore.bounds import DB_READ_TIMEOUT_S, DB_READ_TIMEOUT_VARIABLE, db_read_timeout_seconds
from allot_eventstore.protocol import LOCK_TIMEOUT_MS


def db_bounds(read_timeout_s: float) -> tuple[float | None, float | None]:
    """The event store's ``(read_timeout, write_timeout)`` for ``ALLOT_DB_READ_TIMEOUT`` (0: no bound): an append is
    given a read's time plus the wait for the append lock (the store's ``lock_timeout``)."""
    if not read_timeout_s:
        return None, None
    return read_timeout_s, read_timeout_s + LOCK_TIMEOUT_MS / 1000


class ServiceSettings(msgspec.Struct, frozen=True, kw_only=True):
    service: str
    database_url: str
    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str = ""
    nats_password: str = ""
    nats_token: str = ""
    nats_tls_ca: str = ""
    nats_tls_cert: str = ""
    nats_tls_key: str = ""
    nats_prefix: str = "allot"
    nats_stream: str = "ALLOT_EVENTS"
    http_host: str = "0.0.0.0"
    http_port: int = 8080
    log_level: str = "INFO"
    log_format: str = "json"
    otel_exporter: str = "none"
    config_file: str = ""
    kube_mode: str = "standalone"
    instance: str = ""
    leader_election: str = "advisory"
    lease_namespace: str = "allot-system"
    lease_name: str = ""
    lease_duration_s: float = 15.0
    lease_renew_deadline_s: float = 10.0
    lease_retry_period_s: float = 2.0
    shutdown_timeout_s: float = 10.0
    snapshot_every: int = 20_000  # log positions between two snapshots of the projection (0: none)
    snapshot_keep: int = 2  # snapshots kept per consumer
    db_read_timeout_s: float = DB_READ_TIMEOUT_S

    @property
    def read_timeout(self) -> float | None:
        """Seconds a read of the log is given (None: no bound)."""
        return db_bounds(self.db_read_timeout_s)[0]

    @property
    def write_timeout(self) -> float | None:
        """Seconds an append is given (None: no bound): :func:`db_bounds`."""
        return db_bounds(self.db_read_timeout_s)[1]

    @property
    def nats_auth(self) -> NatsAuth:
        return NatsAuth(**{field: getattr(self, f"nats_{field}") for field in natsauth.ENVIRONMENT})

    @property
    def names(self) -> BusNames:
        return BusNames(prefix=self.nats_prefix, stream=self.nats_stream)

    def config(self) -> JsonObject:
        """The decision config from ``config_file`` (empty = defaults)."""
        return read_config(Path(self.config_file), self.service) if self.config_file else {}


def read_config(path: Path, service: str) -> JsonObject:
    """``service``'s decision config from a YAML/JSON file: Allot's own keys, or this service's part of a Koordinator
    ``KubeSchedulerConfiguration`` / ``DeschedulerConfiguration`` (errors name the field, as ``ALLOT_CONFIG_FILE``)."""
    data = read_config_file(path)
    from allot_runtime.schedconfig import SchedulerConfigError, is_scheduler_config, translate

    if is_scheduler_config(data):  # Koordinator's KubeSchedulerConfiguration: this service's part of it
        try:
            translated = translate(data)
        except SchedulerConfigError as exc:
            raise InvalidInput(
                [(i.path, str(i).removeprefix(f"{i.path}: ")) for i in exc.issues], subject=str(path)
            ) from exc
        import logging

        for warning in translated.warnings:
            logging.getLogger("allot.config").warning("%s: %s: %s", path, warning.path, warning.message)
        return dict(translated.services.get(service, {}))
    from allot_descheduling import is_descheduler_config

    # Koordinator's descheduler config: reservation-manager's part; another service skips it only when the file says
    # what it is (a key such as profiles: in its own file is refused by its parser, never ignored)
    if service == "reservation-manager" and is_descheduler_config(data):
        return {"descheduler": data}
    if is_descheduler_config(data, by_keys=False):
        return {}
    return data


def read_config_file(path: Path, setting: str = "ALLOT_CONFIG_FILE") -> JsonObject:
    """A YAML (or JSON) config file as its parsers get it: a mapping, read as Kubernetes reads its config files
    (YAML turned into JSON: keys are strings, ``1:`` and ``true:`` included; dates are their text), or
    :class:`InvalidInput` saying in one line why it cannot be read."""
    from allot_intake.documents import read_yaml
    from allot_intake.errors import InputError

    try:
        data = (
            read_yaml(path.read_text(), str(path)) or {}
        )  # as manifests are read: a key given twice is refused
    except OSError as exc:
        raise InvalidInput([(setting, f"cannot read {path}: {exc.strerror}")]) from exc
    except (InputError, ValueError) as exc:
        raise InvalidInput([(setting, " ".join(str(exc).split()))]) from exc
    if not isinstance(data, dict):
        raise InvalidInput([(setting, f"{path} must hold a mapping")])
    return {_json_key(k): as_json(v) for k, v in data.items()}


def as_json(value: object) -> JsonValue:
    """``value`` (as ``yaml.safe_load`` reads it) with every mapping key a string (``true``, ``null``, ``1``), dates
    as ISO text and sets as sorted lists, as YAML read into JSON has them."""
    if isinstance(value, dict):
        return {_json_key(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [as_json(v) for v in items]
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if value is None or isinstance(value, str | int | float):
        return value
    raise TypeError(f"not a YAML value: {type(value).__name__}")


def _json_key(key: object) -> str:
    if isinstance(key, bool) or key is None:
        return "null" if key is None else str(key).lower()
    return str(key)


_FIELDS = {
    "database_url": "ALLOT_DATABASE_URL",
    "nats_url": "ALLOT_NATS_URL",
    **{f"nats_{field}": var for field, var in natsauth.ENVIRONMENT.items()},
    "nats_prefix": "ALLOT_NATS_PREFIX",
    "nats_stream": "ALLOT_NATS_STREAM",
    "http_host": "ALLOT_HTTP_HOST",
    "http_port": "ALLOT_HTTP_PORT",
    "log_level": "ALLOT_LOG_LEVEL",
    "log_format": "ALLOT_LOG_FORMAT",
    "otel_exporter": "ALLOT_OTEL_EXPORTER",
    "config_file": "ALLOT_CONFIG_FILE",
    "kube_mode": "ALLOT_KUBE_MODE",
    "instance": "ALLOT_INSTANCE",
    "leader_election": "ALLOT_LEADER_ELECTION",
    "lease_namespace": "ALLOT_LEASE_NAMESPACE",
    "lease_name": "ALLOT_LEASE_NAME",
    "lease_duration_s": "ALLOT_LEASE_DURATION_S",
    "lease_renew_deadline_s": "ALLOT_LEASE_RENEW_DEADLINE_S",
    "lease_retry_period_s": "ALLOT_LEASE_RETRY_PERIOD_S",
    "snapshot_every": "ALLOT_SNAPSHOT_EVERY",
    "snapshot_keep": "ALLOT_SNAPSHOT_KEEP",
    "db_read_timeout_s": "ALLOT_DB_READ_TIMEOUT",
}


def db_read_timeout(environ: Mapping[str, str]) -> float:
    """``ALLOT_DB_READ_TIMEOUT`` for a process without :class:`ServiceSettings` (the relay); :class:`InvalidInput`
    naming it when it is not a number of seconds (0 or more)."""
    try:
        return db_read_timeout_seconds(environ.get(DB_READ_TIMEOUT_VARIABLE, ""))
    except ValueError as exc:
        raise InvalidInput([(DB_READ_TIMEOUT_VARIABLE, str(exc))]) from None


def database_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the event log's URL (not PostgreSQL's), or None: a setting that waiting cannot fix, so
    a process refuses it at start instead of waiting for a database it will never reach."""
    from allot_eventstore.urls import address_problem, plain_url, redact

    try:
        plain_url(url)
        problem = address_problem(url)
    except ValueError as exc:
        return str(exc)
    return None if problem is None else f"{problem} in {redact(url)!r}"


def load(service: str, environ: Mapping[str, str] | None = None) -> ServiceSettings:
    env = os.environ if environ is None else environ
    raw: dict[str, str] = {"service": service}
    for field, var in _FIELDS.items():
        if env.get(var):
            raw[field] = env[var]
    if "database_url" not in raw:
        raise InvalidInput([("ALLOT_DATABASE_URL", "is required (e.g. postgresql://user@host:5432/allot)")])
    db_read_timeout(env)  # refused naming the variable, not as the environment's conversion error
    database_problem = database_url_problem(raw["database_url"])
    if database_problem is not None:
        raise InvalidInput([("ALLOT_DATABASE_URL", database_problem)])
    try:
        settings = msgspec.convert(raw, ServiceSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidInput([("environment", str(exc))]) from exc
    nats_problems = natsauth.problems(settings.nats_auth, settings.nats_url)
    if nats_problems:
        raise InvalidInput(nats_problems)
    if settings.otel_exporter not in ("none", "console", "otlp"):
        raise InvalidInput([("ALLOT_OTEL_EXPORTER", "must be none, console or otlp")])
    if settings.log_format not in ("json", "text"):
        raise InvalidInput([("ALLOT_LOG_FORMAT", "must be json or text")])
    if settings.kube_mode not in ("standalone", "kubernetes"):
        raise InvalidInput([("ALLOT_KUBE_MODE", "must be standalone or kubernetes")])
    if settings.leader_election not in ("advisory", "lease"):
        raise InvalidInput([("ALLOT_LEADER_ELECTION", "must be advisory or lease")])
    if settings.snapshot_every < 0:
        raise InvalidInput([("ALLOT_SNAPSHOT_EVERY", "must be 0 (no snapshots) or a number of events")])
    if settings.snapshot_keep < 1:
        raise InvalidInput([("ALLOT_SNAPSHOT_KEEP", "must be at least 1")])
    if not (settings.lease_duration_s > settings.lease_renew_deadline_s > settings.lease_retry_period_s > 0):
        raise InvalidInput(
            [
                (
                    "ALLOT_LEASE_DURATION_S",
                    "ALLOT_LEASE_DURATION_S > ALLOT_LEASE_RENEW_DEADLINE_S > ALLOT_LEASE_RETRY_PERIOD_S > 0 "
                    "must hold",
                )
            ]
        )
    return settings
