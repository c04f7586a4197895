"""Gang engine configuration: typed settings with their defaults, and one validation function.

Responsibility, in three parts as a scheduler plugin's ``apis/config`` (types, defaults, validation):

- **types**: :class:`GangConfig` and :class:`QueueConfig`, frozen msgspec Structs whose field names are the
  configuration keys (camelCase: ``defaultTimeoutSeconds``, ``queue.maxBypasses``); a choice is a ``Literal`` type;
- **defaults**: every field has one, so ``GangConfig()`` (and ``from_dict({})``) is the default configuration;
- **validation**: :func:`validate` checks a typed configuration (ranges, a non-empty version, the relations between
  fields) and returns every problem with its path.

``GangConfig.from_dict`` reads a mapping into the types (an unknown key, or a value of the wrong type, is a problem
at its path) and validates the result: every problem of a mapping is refused together in one ``ConfigError``, in
key order, never silently defaulted. ``to_dict`` gives the same mapping back, so the configuration can be recorded
next to decisions and replay can rebuild the exact engine. The version is recorded with it.

Invariants:
- Durations are whole seconds in the mapping and microseconds inside the engine.
- There is no maximum gang timeout (decision 12): ``defaultTimeoutSeconds`` only applies when a gang names none.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, get_args

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject

from ._keys import MATCH_POLICIES, MODES, ONCE_SATISFIED, STRICT, seconds
from .errors import ConfigError

__all__ = ["GangConfig", "QueueConfig", "validate"]

_S = TypeVar("_S", bound=msgspec.Struct)
MatchPolicy = Literal["once-satisfied", "only-waiting", "waiting-and-running"]
Mode = Literal["Strict", "NonStrict"]
if get_args(MatchPolicy) != MATCH_POLICIES or get_args(Mode) != MODES:  # one vocabulary (allot_contracts)
    raise ImportError("allot_gang.config: the choice types disagree with the gang vocabulary")


class QueueConfig(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Anti-starvation limits of the pure queue model (see ``allot_gang.queue``).

    - ``max_bypasses``: how many later items may be placed past a blocked gang before it starts holding capacity.
    - ``max_blocked_seconds``: how long a gang may stay blocked before it starts holding capacity (0 = no limit
      by time; only ``max_bypasses`` counts).
    - ``max_reserve_seconds``: how long a gang may hold capacity without fitting before it yields and small items
      flow again (0 = no limit by time).
    - ``max_reserve_rounds``: how many failed attempts a holding gang gets before it yields (0 = no limit).
    At least one of ``max_reserve_seconds`` / ``max_reserve_rounds`` must be positive, so a gang that can never
    fit cannot hold capacity forever.
    """

    max_bypasses: int = 8
    max_blocked_seconds: int = 120
    max_reserve_seconds: int = 600
    max_reserve_rounds: int = 0

    @property
    def max_blocked_us(self) -> int:
        return seconds(self.max_blocked_seconds)

    @property
    def max_reserve_us(self) -> int:
        return seconds(self.max_reserve_seconds)


class GangConfig(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Engine configuration. Keys: ``version``, ``defaultTimeoutSeconds`` (600), ``defaultMatchPolicy``
    (``once-satisfied``), ``defaultMode`` (``Strict``), ``retryInitialBackoffSeconds`` (10),
    ``retryMaxBackoffSeconds`` (300) and ``queue`` (``maxBypasses`` 8, ``maxBlockedSeconds`` 120,
    ``maxReserveSeconds`` 600, ``maxReserveRounds`` 0)."""

    version: str = "1"
    default_timeout_seconds: int = 600
    default_match_policy: MatchPolicy = ONCE_SATISFIED
    default_mode: Mode = STRICT
    retry_initial_backoff_seconds: int = 10
    retry_max_backoff_seconds: int = 300
    queue: QueueConfig = msgspec.field(default_factory=QueueConfig)

    @property
    def default_timeout_us(self) -> int:
        return seconds(self.default_timeout_seconds)

    def backoff_us(self, failures: int) -> int:
        """Delay before retry number ``failures`` (1-based): initial × 2^(failures-1), at most the maximum."""
        initial = seconds(self.retry_initial_backoff_seconds)
        cap = seconds(self.retry_max_backoff_seconds)
        if failures <= 1 or initial == 0:
            return min(initial, cap)
        shift = min(failures - 1, 62)
        return min(initial << shift, cap)

    @classmethod
    def from_dict(cls, d: object = None) -> GangConfig:
        """The configuration a mapping gives, or ``ConfigError`` listing every problem with its path."""
        if d is None:
            d = {}
        if not isinstance(d, dict):
            raise ConfigError([FieldIssue(path="$", message="must be a mapping")])
        issues: list[tuple[tuple[str, ...], FieldIssue]] = []
        config: GangConfig = _decode(cls, d, (), issues)
        issues += [(tuple(issue.path.split(".")), issue) for issue in validate(config, relations=False)]
        if issues:
            raise ConfigError([issue for _, issue in sorted(issues, key=lambda item: item[0])])
        related = validate(config)  # the fields are valid: what is left is how they relate
        if related:
            raise ConfigError(related)
        return config

    def to_dict(self) -> JsonObject:
        out = msgspec.to_builtins(self)
        assert isinstance(out, dict)
        return out


# -- validation ----------------------------------------------------------------------------------------------------
_AT_LEAST = {
    "defaultTimeoutSeconds": 1,
    "retryInitialBackoffSeconds": 0,
    "retryMaxBackoffSeconds": 0,
    "queue.maxBypasses": 1,
    "queue.maxBlockedSeconds": 0,
    "queue.maxReserveSeconds": 0,
    "queue.maxReserveRounds": 0,
}


def validate(config: GangConfig, *, relations: bool = True) -> list[FieldIssue]:
    """Every problem of a typed configuration, in field order, with its path: values out of range and an empty
    version, then (only when there are none, and ``relations``) the relations between fields."""
    values: dict[str, object] = {
        "version": config.version,
        "defaultTimeoutSeconds": config.default_timeout_seconds,
        "retryInitialBackoffSeconds": config.retry_initial_backoff_seconds,
        "retryMaxBackoffSeconds": config.retry_max_backoff_seconds,
        **{f"queue.{k}": v for k, v in msgspec.to_builtins(config.queue).items()},
    }
    issues: list[FieldIssue] = []
    for path, value in values.items():
        if path == "version" and not value:
            issues.append(FieldIssue(path=path, message="must be a non-empty string", value=str(value)))
        elif path in _AT_LEAST and isinstance(value, int) and value < _AT_LEAST[path]:
            issues.append(FieldIssue(path=path, message=f"must be >= {_AT_LEAST[path]}", value=str(value)))
    if issues or not relations:
        return issues
    if config.retry_max_backoff_seconds < config.retry_initial_backoff_seconds:
        issues.append(
            FieldIssue(
                path="retryMaxBackoffSeconds",
                message="must be >= retryInitialBackoffSeconds",
                value=str(config.retry_max_backoff_seconds),
            )
        )
    if config.queue.max_reserve_seconds == 0 and config.queue.max_reserve_rounds == 0:
        issues.append(
            FieldIssue(
                path="queue",
                message="maxReserveSeconds or maxReserveRounds must be positive, "
                "or a gang that never fits would hold capacity forever",
            )
        )
    return issues


# -- reading a mapping into the types ------------------------------------------------------------------------------
def _decode(
    kind: type[Any],
    data: dict[Any, Any],
    at: tuple[str, ...],
    issues: list[tuple[tuple[str, ...], FieldIssue]],
) -> Any:
    """``data`` read into the Struct ``kind``: a key it does not have, or a value of the wrong type, is an issue (at
    the key's place in key order) and leaves that field at its default."""
    fields = {f.encode_name: f for f in msgspec.structs.fields(kind)}
    values: dict[str, object] = {}
    for key, value in sorted(
        data.items(), key=lambda item: str(item[0])
    ):  # keys of any type: never a TypeError
        where, path = (*at, str(key)), ".".join((*at, str(key)))
        field = fields.get(key)
        if field is None:
            issues.append((where, FieldIssue(path=path, message="unknown configuration key")))
        elif isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            if isinstance(value, dict):
                values[field.name] = _decode(field.type, value, where, issues)
            else:
                issues.append((where, FieldIssue(path=path, message="must be a mapping")))
        else:
            try:
                values[field.name] = msgspec.convert(value, field.type, strict=True)
            except msgspec.ValidationError:
                issues.append((where, FieldIssue(path=path, message=_expected(field.type), value=str(value))))
    return kind(**values)


def _expected(kind: Any) -> str:
    if kind is int:
        return "must be an integer"
    if kind is str:
        return "must be a non-empty string"
    return "must be one of " + ", ".join(get_args(kind))
