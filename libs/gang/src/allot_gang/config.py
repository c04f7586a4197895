"""Gang engine configuration: defaults for gang settings, retry backoff and the queue's anti-starvation limits.

Responsibility: a frozen, versioned value that the shell loads once (``GangConfig.from_dict``) and passes to the
engine; ``to_dict`` gives the same dictionary back so the configuration can be recorded next to decisions and
replay can rebuild the exact engine.

Invariants:
- Every field has a default; ``from_dict({})`` is the default configuration.
- Durations are whole seconds in the dictionary and microseconds inside the engine.
- Unknown keys, wrong types and out-of-range values are refused together in one ``ConfigError`` listing every
  problem with its path (``queue.maxBypasses``), never silently defaulted.
- There is no maximum gang timeout (decision 12): ``defaultTimeoutSeconds`` only applies when a gang names none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from allot_contracts.issues import FieldIssue

from ._keys import MATCH_POLICIES, MODES, ONCE_SATISFIED, STRICT, seconds
from .errors import ConfigError

__all__ = ["GangConfig", "QueueConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueConfig:
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


_QUEUE_KEYS = {
    "maxBypasses": ("max_bypasses", 1),
    "maxBlockedSeconds": ("max_blocked_seconds", 0),
    "maxReserveSeconds": ("max_reserve_seconds", 0),
    "maxReserveRounds": ("max_reserve_rounds", 0),
}
_INT_KEYS = {
    "defaultTimeoutSeconds": ("default_timeout_seconds", 1),
    "retryInitialBackoffSeconds": ("retry_initial_backoff_seconds", 0),
    "retryMaxBackoffSeconds": ("retry_max_backoff_seconds", 0),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class GangConfig:
    """Engine configuration. Dictionary keys are camelCase: ``version``, ``defaultTimeoutSeconds`` (600),
    ``defaultMatchPolicy`` (``once-satisfied``), ``defaultMode`` (``Strict``), ``retryInitialBackoffSeconds``
    (10), ``retryMaxBackoffSeconds`` (300) and ``queue`` (``maxBypasses`` 8, ``maxBlockedSeconds`` 120,
    ``maxReserveSeconds`` 600, ``maxReserveRounds`` 0)."""

    version: str = "1"
    default_timeout_seconds: int = 600
    default_match_policy: str = ONCE_SATISFIED
    default_mode: str = STRICT
    retry_initial_backoff_seconds: int = 10
    retry_max_backoff_seconds: int = 300
    queue: QueueConfig = field(default_factory=QueueConfig)

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
    def from_dict(cls, d: dict[str, Any] | None = None) -> GangConfig:
        d = {} if d is None else d
        errors: list[FieldIssue] = []
        if not isinstance(d, dict):
            raise ConfigError([FieldIssue(path="$", message="must be a mapping")])
        kwargs: dict[str, Any] = {}
        for key, value in sorted(d.items()):
            if key == "version":
                if not isinstance(value, str) or not value:
                    errors.append(
                        FieldIssue(path="version", message="must be a non-empty string", value=str(value))
                    )
                else:
                    kwargs["version"] = value
            elif key in _INT_KEYS:
                name, low = _INT_KEYS[key]
                _int_into(kwargs, errors, key, name, value, low)
            elif key == "defaultMatchPolicy":
                _choice_into(kwargs, errors, key, "default_match_policy", value, MATCH_POLICIES)
            elif key == "defaultMode":
                _choice_into(kwargs, errors, key, "default_mode", value, MODES)
            elif key == "queue":
                kwargs["queue"] = _queue_from(value, errors)
            else:
                errors.append(FieldIssue(path=str(key), message="unknown configuration key"))
        if not errors:
            cfg = cls(**kwargs)
            if cfg.retry_max_backoff_seconds < cfg.retry_initial_backoff_seconds:
                errors.append(
                    FieldIssue(
                        path="retryMaxBackoffSeconds",
                        message="must be >= retryInitialBackoffSeconds",
                        value=str(cfg.retry_max_backoff_seconds),
                    )
                )
            q = cfg.queue
            if q.max_reserve_seconds == 0 and q.max_reserve_rounds == 0:
                errors.append(
                    FieldIssue(
                        path="queue",
                        message="maxReserveSeconds or maxReserveRounds must be positive, "
                        "or a gang that never fits would hold capacity forever",
                    )
                )
            if not errors:
                return cfg
        raise ConfigError(errors)

    def to_dict(self) -> dict[str, Any]:
        q = self.queue
        return {
            "version": self.version,
            "defaultTimeoutSeconds": self.default_timeout_seconds,
            "defaultMatchPolicy": self.default_match_policy,
            "defaultMode": self.default_mode,
            "retryInitialBackoffSeconds": self.retry_initial_backoff_seconds,
            "retryMaxBackoffSeconds": self.retry_max_backoff_seconds,
            "queue": {
                "maxBypasses": q.max_bypasses,
                "maxBlockedSeconds": q.max_blocked_seconds,
                "maxReserveSeconds": q.max_reserve_seconds,
                "maxReserveRounds": q.max_reserve_rounds,
            },
        }


def _int_into(
    kwargs: dict[str, Any], errors: list[FieldIssue], path: str, name: str, value: object, low: int
) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldIssue(path=path, message="must be an integer", value=str(value)))
    elif value < low:
        errors.append(FieldIssue(path=path, message=f"must be >= {low}", value=str(value)))
    else:
        kwargs[name] = value


def _choice_into(
    kwargs: dict[str, Any],
    errors: list[FieldIssue],
    path: str,
    name: str,
    value: object,
    choices: tuple[str, ...],
) -> None:
    if value not in choices:
        errors.append(FieldIssue(path=path, message="must be one of " + ", ".join(choices), value=str(value)))
    else:
        kwargs[name] = value


def _queue_from(value: object, errors: list[FieldIssue]) -> QueueConfig:
    if not isinstance(value, dict):
        errors.append(FieldIssue(path="queue", message="must be a mapping"))
        return QueueConfig()
    kwargs: dict[str, Any] = {}
    for key, v in sorted(value.items()):
        if key in _QUEUE_KEYS:
            name, low = _QUEUE_KEYS[key]
            _int_into(kwargs, errors, f"queue.{key}", name, v, low)
        else:
            errors.append(FieldIssue(path=f"queue.{key}", message="unknown configuration key"))
    return QueueConfig(**kwargs)
