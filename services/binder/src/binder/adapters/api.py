"""Writes of the binder to the API server: a POST whose refusal for lack of rights is final, and the backoff of a
write that is tried again."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from allot_contracts.jsonvalue import JsonObject
from allot_runtime.kube.client import ApiError, call


async def post(
    client: Any, path: str, body: JsonObject, *, kind: str, permission: str, refused: type[Exception]
) -> ApiError | None:
    """POST ``body`` (a ``kind`` object) to ``path``: None when accepted, else the API server's error. 401/403 raise
    ``refused`` (no retry gives the binder the ``permission`` its RBAC lacks); no answer raises ``TransientError``."""
    try:
        await call(client, "POST", path, body)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise refused(
                f"the API server refused the {kind} ({exc}): check the binder's RBAC (create {permission})"
            ) from exc
        return exc
    return None


@dataclass
class Retry:
    """The backoff of one object's write: failures so far, and the monotonic time before which it is not tried."""

    failures: int = 0
    not_before: float = 0.0
