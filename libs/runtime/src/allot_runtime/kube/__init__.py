"""Kubernetes objects into the event log: list-watch, "what was recorded" from the log, real changes only.

Shared by node-reporter's watch (``node_reporter.adapters.kube``: Nodes, Koordinator ``Device``, ``NodeResourceTopology``) and
``allot kube-sync`` (pods, ElasticQuota, ElasticQuotaProfile, PodGroup).

- :func:`api_client`: a kubernetes-asyncio client from ``ALLOT_KUBECONFIG``, ``KUBECONFIG``, the in-cluster service
  account, or ``~/.kube/config``, in that order.
- :class:`Reflector`: list (paged), then watch from the list's ``resourceVersion`` with bookmarks and a server-side
  timeout; a watch that ends is resumed from the last version seen; ``410 Gone`` (an expired version, as an HTTP
  status or an ``ERROR`` event) makes it list again, and the list is handed over whole, so deletions missed while
  the watch was down are reconciled. Responses are read raw (``_preload_content=False``): objects stay the JSON the
  API server sent, nothing is lost in model round trips.
- :class:`Mirror`: for one kind, the objects as recorded in the log (folded from the log at start and before every
  reconciliation, so a restart neither records everything again nor misses a deletion) and the rule "record only a
  real change": a fingerprint of the parts that matter is compared, so status heartbeats record nothing. Event ids
  are derived from (kind, uid, resourceVersion) — deletions from (kind, uid) — so recording twice is a no-op.

Errors: transport failures, 5xx and 429 are transient (retried with backoff, logged); 401/403 are logged as errors
and retried too (fixing RBAC must not need a restart); a watch ``ERROR`` other than 410 ends the watch and is
retried. Nothing here decides anything: the services do, from the recorded events.
"""

from allot_runtime.kube.client import (
    DEVICES,
    ELASTIC_QUOTAS,
    MIGRATION_JOBS,
    NODES,
    POD_GROUPS,
    PODS,
    QUOTA_PROFILES,
    RESERVATIONS,
    TOPOLOGIES,
    ApiError,
    ApiUnavailable,
    Expired,
    Resource,
    api_client,
    call,
    meta,
    object_key,
    part,
    read_json,
    request,
    status_error,
)
from allot_runtime.kube.mirror import (
    BINDER_FIELD_MANAGER,
    Kind,
    Known,
    Mirror,
    Writer,
    event_fold,
    spec_fingerprint,
    storage_issues,
    strip_server_fields,
    without_owned,
)
from allot_runtime.kube.reflector import Backoff, Reflector, Sink, WatchMetrics, list_watches, run_in_order

__all__ = [
    "BINDER_FIELD_MANAGER",
    "DEVICES",
    "ELASTIC_QUOTAS",
    "MIGRATION_JOBS",
    "NODES",
    "PODS",
    "POD_GROUPS",
    "QUOTA_PROFILES",
    "RESERVATIONS",
    "TOPOLOGIES",
    "ApiError",
    "ApiUnavailable",
    "Backoff",
    "Expired",
    "Kind",
    "Known",
    "Mirror",
    "Reflector",
    "Resource",
    "Sink",
    "WatchMetrics",
    "Writer",
    "api_client",
    "call",
    "event_fold",
    "list_watches",
    "meta",
    "object_key",
    "part",
    "read_json",
    "request",
    "run_in_order",
    "spec_fingerprint",
    "status_error",
    "storage_issues",
    "strip_server_fields",
    "without_owned",
]
