"""Fuzzing the admission webhooks as the API server reaches them: the real server (TLS, the webhook's limits) on a
real socket, sent AdmissionReviews built from the examples' Pods, ElasticQuotas, PodGroups and Reservations with a
wrong type (or a missing field) at any level, random JSON, random bytes and JSON nested too deep. Every answer: no 5xx,
no traceback logged, within the timeout; a refusal (400) names the field, a denial names the field path of each
cause, and only an allowed pod gets a patch."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.colocation_profile import parse_colocation_profile
from allot_runtime.httpserver import start
from allot_testing import fuzz
from allot_testing.builders import a_quota
from allot_testing.http_fuzz import Client, Tracebacks, json_values, served, with_wrong_type
from allot_testing.tls import make_certificates
from allot_webhook.server import LIMITS, VALIDATED, ProfileWorld, Webhook

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command to make a CA"
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
OPERATIONS = ("CREATE", "UPDATE", "DELETE")


def objects() -> list[dict[str, Any]]:
    """One example of each kind the webhook validates (a pod of Allot's and one routed to it)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) in VALIDATED:
                found.setdefault(str(doc["kind"]), doc)
    pod = found["Pod"]
    ours = {**pod, "spec": {**pod["spec"], "schedulerName": "allot-scheduler"}}
    return [*found.values(), ours]


def as_review(obj: dict[str, Any], operation: str, version: str = "admission.k8s.io/v1") -> dict[str, Any]:
    group, _, api = str(obj["apiVersion"]).rpartition("/")
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": api, "kind": obj["kind"]},
        "namespace": (obj.get("metadata") or {}).get("namespace", "default"),
        "operation": operation,
        "object": None if operation == "DELETE" else obj,
    }
    if operation != "CREATE":
        request["oldObject"] = obj
    return {"apiVersion": version, "kind": "AdmissionReview", "request": request}


REVIEWS = [as_review(o, op) for o in objects() for op in OPERATIONS] + [
    as_review(o, "CREATE", "admission.k8s.io/v1beta1") for o in objects()
]


def deep(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def bodies() -> st.SearchStrategy[bytes]:
    wrong = st.sampled_from(REVIEWS).flatmap(with_wrong_type).map(lambda d: json.dumps(d).encode())
    wrong_object = (
        st.sampled_from(REVIEWS)
        .filter(lambda r: isinstance(r["request"]["object"], dict))
        .flatmap(lambda r: with_wrong_type(r["request"]["object"]).map(lambda o: _with_object(r, o)))
        .map(lambda d: json.dumps(d).encode())
    )
    return st.one_of(
        wrong_object,
        wrong,
        st.sampled_from(REVIEWS).map(lambda d: json.dumps(d).encode()),
        json_values().map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=300),
        st.integers(min_value=LIMITS.max_depth - 2, max_value=100_000).map(deep),
    )


def _with_object(review: dict[str, Any], obj: Any) -> dict[str, Any]:
    return {**review, "request": {**review["request"], "object": obj}}


def with_cluster() -> Webhook:
    """The webhook as in a cluster: ElasticQuotas to check trees against, a ClusterColocationProfile for every pod."""
    issues: list[FieldIssue] = []
    profile = parse_colocation_profile(
        {
            "metadata": {"name": "everyone"},
            "spec": {
                "qosClass": "BE",
                "priorityClassName": "koord-batch",
                "labels": {"koordinator.sh/mutated": "true"},
                "patch": {"spec": {"terminationGracePeriodSeconds": 30}},
            },
        },
        issues,
        [],
    )
    assert profile is not None, issues

    async def quotas() -> list[dict[str, Any]]:
        return [
            a_quota("parent", max={"cpu": "100"}, min={"cpu": "10"}),
            a_quota("team-a", max={"cpu": "10"}),
        ]

    async def profiles(namespace: str) -> ProfileWorld:
        return ProfileWorld(profiles=[profile])

    return Webhook(quotas=quotas, profiles=profiles)


def check(sent: bytes, answer: Any, tally: fuzz.Tally) -> None:
    assert answer.status < 500, answer
    assert answer.seconds < LIMITS.body_timeout + LIMITS.header_timeout, answer
    assert answer.headers.get("x-content-type-options") == "nosniff"
    body = json.loads(answer.body)
    if answer.status != 200:
        assert answer.status in (400, 413), answer
        message = body["message"]
        assert message.startswith(("the body", "apiVersion:", "kind:", "request")), message
        tally.count(f"refused {answer.status}")
        return
    response = body["response"]
    uid = json.loads(sent)["request"]["uid"]
    assert isinstance(uid, str) and uid and response["uid"] == uid, response
    if response["allowed"]:
        tally.count("allowed, patched" if "patch" in response else "allowed")
        if "patch" in response:
            assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
        return
    tally.count("denied")
    assert "patch" not in response
    causes = response["status"]["details"]["causes"]
    assert causes and all(isinstance(c["field"], str) for c in causes), response
    assert any(c["field"] for c in causes), response


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_the_webhooks_answer_every_body_without_a_5xx(examples: int, tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    tally = fuzz.Tally("admission webhooks")
    with (
        Tracebacks().watching() as logged,
        served(lambda: start(with_cluster().app(LIMITS), "127.0.0.1", 0, ssl_context=context)) as port,
    ):
        client = Client(port, ssl.create_default_context(cafile=ca))

        def case(data: bytes, path: str) -> None:
            answer = client.request("POST", path, data, {"Content-Type": "application/json"})
            check(data, answer, tally)
            assert not logged.records, logged.lines()

        cases: Callable[[], None] = fuzz.settings_for(examples)(
            given(bodies(), st.sampled_from(["/validate", "/mutate"]))(case)
        )
        try:
            cases()
        finally:
            client.close()
