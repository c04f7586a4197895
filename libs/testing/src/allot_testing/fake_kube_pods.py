"""The pod subresources of the fake API server: ``pods/binding`` and ``pods/eviction``, with the answers the real API
server gives (pinned by ``tests/kube/contract``).

- Binding (``POST …/pods/{name}/binding``, core/v1 Binding): missing pod 404; uid precondition 409; a pod being
  deleted 409 Conflict ("pod x is being deleted, cannot be assigned to a host"); already bound 409 ("pod x is already
  assigned to node \\"n\\""); scheduling gates 409; a target that is not a Node 422; success sets ``spec.nodeName``,
  merges the Binding's annotations, adds ``PodScheduled`` and answers 201 with a ``Status``.
- Eviction (``POST …/pods/{name}/eviction``, policy/v1 Eviction): missing pod 404; uid precondition 409; a pod that
  finished (Succeeded/Failed) is deleted without looking at budgets; more than one PodDisruptionBudget selecting the
  pod 500 ("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.");
  one whose ``status.disruptionsAllowed`` is 0 (or a pod in :attr:`FakeKube.disruption_blocked`) 429 with the
  ``DisruptionBudget`` cause; otherwise the budget's ``disruptionsAllowed`` is decremented, the pod deleted, 201.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from allot_testing.fake_kube_rules import Obj, status

if TYPE_CHECKING:
    from allot_testing.fake_kube import FakeKube


def _conflict(message: str, name: str, kind: str = "pods") -> web.Response:
    return web.json_response(
        status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {kind} "{name}": {message}',
            name=name,
            kind=kind,
        ),
        status=409,
    )


def _uid_conflict(want: str, have: str, name: str) -> web.Response:
    return _conflict(f"Precondition failed: UID in precondition: {want}, UID in object meta: {have}", name)


def bind(kube: FakeKube, namespace: str, name: str, body: Obj) -> web.Response:
    kube.bindings.append(body)
    pod = kube.objects.get(("pods", namespace, name))
    if pod is None:
        return kube.not_found(kube.resource("pods"), name)
    meta, spec = pod["metadata"], pod.setdefault("spec", {})
    want_uid = (body.get("metadata") or {}).get("uid")
    if want_uid and want_uid != meta["uid"]:
        return _uid_conflict(want_uid, meta["uid"], name)
    if meta.get("deletionTimestamp"):
        return _conflict(f"pod {name} is being deleted, cannot be assigned to a host", name, "pods/binding")
    if spec.get("nodeName"):
        return _conflict(f'pod {name} is already assigned to node "{spec["nodeName"]}"', name, "pods/binding")
    if spec.get("schedulingGates"):
        return _conflict(f"pod {name} has non-empty .spec.schedulingGates", name, "pods/binding")
    target = body.get("target") or {}
    if target.get("kind", "Node") != "Node" or not target.get("name"):
        return web.json_response(
            status(422, "Invalid", "Binding.target: a Node name is required"), status=422
        )

    def assign(obj: Obj) -> None:
        obj["spec"]["nodeName"] = target["name"]
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        if annotations:
            obj["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}), **annotations}
        conditions = obj.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": "PodScheduled", "status": "True"})

    kube.update("Pod", name, assign, namespace)
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
    )


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    """A PodDisruptionBudget's label selector (``matchLabels`` and ``In``/``NotIn``/``Exists``/``DoesNotExist``
    expressions; an empty selector selects every pod of the namespace in policy/v1)."""
    if not isinstance(selector, dict):
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and present and labels.get(key) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def evict(kube: FakeKube, namespace: str, name: str, body: Obj) -> web.Response:
    kube.evictions.append(body)
    pod = kube.objects.get(("pods", namespace, name))
    if pod is None:
        return kube.not_found(kube.resource("pods"), name)
    want = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
    if want and want != pod["metadata"]["uid"]:
        return _uid_conflict(want, pod["metadata"]["uid"], name)
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    if not finished:
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            o
            for (plural, ns, _), o in sorted(kube.objects.items())
            if plural == "poddisruptionbudgets"
            and ns == namespace
            and _selects((o.get("spec") or {}).get("selector"), labels)
        ]
        if len(budgets) > 1:
            message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": message,
                    "code": 500,
                },
                status=500,
            )
        blocked = f"{namespace}/{name}" in kube.disruption_blocked
        if budgets and int((budgets[0].get("status") or {}).get("disruptionsAllowed") or 0) <= 0:
            blocked = True
        if blocked:
            budget = budgets[0] if budgets else {"metadata": {"name": "budget"}, "status": {}}
            health = budget.get("status") or {}
            cause = (
                f"The disruption budget {budget['metadata']['name']} needs {health.get('desiredHealthy', 1)} healthy "
                f"pods and has {health.get('currentHealthy', 1)} currently"
            )
            return web.json_response(
                status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    causes=[{"reason": "DisruptionBudget", "message": cause}],
                ),
                status=429,
            )
        if budgets:
            meta = budgets[0]["metadata"]

            def spend(obj: Obj) -> None:
                obj.setdefault("status", {})["disruptionsAllowed"] = (
                    int(obj["status"].get("disruptionsAllowed", 0)) - 1
                )

            kube.update("PodDisruptionBudget", meta["name"], spend, namespace)
    kube.delete("Pod", name, namespace)
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
    )
