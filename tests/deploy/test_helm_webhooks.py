"""The Helm chart's admission webhooks: they reach the webhook process, cover every kind it validates, leave the
binder's own writes alone, and are trusted through the generated certificate or cert-manager's.

The chart is rendered offline by Helm's own template engine (:mod:`allot_testing.helm_chart`); the fixtures
``rendered`` (every case of ``CASES``) and ``crds`` are in conftest.py.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from base64 import b64decode
from pathlib import Path

import pytest

from allot_testing.helm_chart import (
    CASES,
    Obj,
    by_kind,
    component,
    pod,
    workloads,
)

FIXTURES = Path(__file__).parent / "fixtures"


# -- admission webhooks --------------------------------------------------------------------------------------------


def _webhooks(objects: list[Obj]) -> list[tuple[str, Obj]]:
    return [
        (o["kind"], hook)
        for o in objects
        if o["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for hook in o["webhooks"]
    ]


@pytest.mark.parametrize("case", CASES)
def test_webhooks_reach_the_webhook_process(case: str, rendered: dict[str, list[Obj]]) -> None:
    release, namespace, values = CASES[case]
    objects = rendered[case]
    services = by_kind(objects, "Service")
    (container,) = pod(workloads(objects)["webhook"])["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen = next(int(a.split("=", 1)[1]) for a in container["command"] if a.startswith("--port="))
    assert ports["https"] == listen == values.get("webhook", {}).get("port", 9443)
    hooks = _webhooks(objects)
    assert {kind for kind, _ in hooks} == (
        {"ValidatingWebhookConfiguration"}
        if case == "custom"
        else {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    )
    for kind, hook in hooks:
        ref = hook["clientConfig"]["service"]
        service = services[ref["name"]]
        assert ref["namespace"] == namespace
        (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
        assert ports[port["targetPort"]] == listen
        assert (
            service["spec"]["selector"].items()
            <= workloads(objects)["webhook"]["spec"]["template"]["metadata"]["labels"].items()
        )
        assert ref["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
        policy = values.get("webhook", {}).get(
            "validating" if kind.startswith("Validating") else "mutating", {}
        )
        assert hook["failurePolicy"] == policy.get("failurePolicy", "Fail")
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        if hook["rules"][0]["resources"] == ["pods"]:
            # Allot's own namespace (and kube-system) never depend on the webhook being up.
            excluded = [
                e
                for e in hook["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name"
            ]
            assert excluded == [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [namespace, "kube-system"],
                }
            ]
            assert hook["objectSelector"] == values.get("webhook", {}).get("objectSelector", {})


def test_the_validating_webhook_covers_every_kind_the_webhook_validates(
    rendered: dict[str, list[Obj]], crds: list[Obj]
) -> None:
    from allot_webhook.server import VALIDATED

    resources = {(c["spec"]["group"], c["spec"]["names"]["plural"]): c["spec"]["names"]["kind"] for c in crds}
    resources[("", "pods")] = "Pod"
    covered = set()
    for kind, hook in _webhooks(rendered["external"]):
        if kind == "ValidatingWebhookConfiguration":
            for rule in hook["rules"]:
                for group in rule["apiGroups"]:
                    for version in rule["apiVersions"]:
                        for resource in rule["resources"]:
                            api_version = f"{group}/{version}" if group else version
                            covered.add((api_version, resources[(group, resource)]))
                if rule["resources"] == ["pods"]:
                    # an update may not change a pod's QoS class or priority: the webhook must see updates
                    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert covered == set(VALIDATED)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_binders_own_writes_are_not_reviewed(case: str, rendered: dict[str, list[Obj]]) -> None:
    """The binder patches Allot's status annotations on every ElasticQuota: the validating webhook is scoped so that
    none of its writes is sent for review (a matchCondition on its ServiceAccount), and no rule names a subresource,
    so status writes (``elasticquotas/status``, ``podgroups/status``, …) are never reviewed either."""
    objects = rendered[case]
    namespace = CASES[case][1]
    account = pod(workloads(objects)["binder"])["serviceAccountName"]
    assert account in by_kind(objects, "ServiceAccount")
    binder = f"system:serviceaccount:{namespace}:{account}"
    for kind, hook in _webhooks(objects):
        if kind != "ValidatingWebhookConfiguration" or hook["name"] != "objects.validate.allot.dev":
            continue
        assert {"name": "not-allot-binder", "expression": f"request.userInfo.username != '{binder}'"} in hook[
            "matchConditions"
        ]
        assert all("/" not in r and "*" not in r for rule in hook["rules"] for r in rule["resources"])


class _TLSServer:
    """A TLS server on loopback with the rendered certificate and key, for one handshake."""

    def __init__(self, cert: bytes, key: bytes) -> None:
        self.dir = tempfile.TemporaryDirectory()
        cert_file, key_file = Path(self.dir.name) / "tls.crt", Path(self.dir.name) / "tls.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert_file, key_file)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(10)
        conn, _ = self.sock.accept()
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            pass

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.sock.close()
        self.dir.cleanup()


def _handshake(cert: bytes, key: bytes, ca_bundle: bytes, server_name: str) -> bytes:
    server = _TLSServer(cert, key)
    try:
        client = ssl.create_default_context(cadata=ca_bundle.decode())
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            return tls.recv(2)
    finally:
        server.close()


def test_the_generated_certificate_is_trusted_by_the_webhook_configurations(
    rendered: dict[str, list[Obj]],
) -> None:
    """Without cert-manager: the API server (trusting caBundle) completes a TLS handshake with the webhook's
    certificate under the Service's DNS name, and would refuse another name."""
    objects = rendered["external"]
    (secret,) = [s for s in by_kind(objects, "Secret").values() if s["type"] == "kubernetes.io/tls"]
    volumes = {v["name"]: v for v in pod(workloads(objects)["webhook"])["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    bundles = {hook["clientConfig"]["caBundle"] for _, hook in _webhooks(objects)}
    assert bundles == {secret["data"]["ca.crt"]}
    cert, key, ca = (b64decode(secret["data"][k]) for k in ("tls.crt", "tls.key", "ca.crt"))
    service = "allot-webhook.allot-system.svc"
    assert _handshake(cert, key, ca, service) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(cert, key, ca, "allot-webhook.elsewhere.svc")
    # The pods roll when the certificate changes (the process reads it at start).
    annotations = workloads(objects)["webhook"]["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/tls" in annotations


@pytest.mark.parametrize("case", ["bundled", "custom"])
def test_with_cert_manager_the_certificate_is_issued_and_its_ca_injected(
    case: str, rendered: dict[str, list[Obj]]
) -> None:
    release, namespace, values = CASES[case]
    objects = rendered[case]
    assert [s for s in by_kind(objects, "Secret").values() if s["type"] == "kubernetes.io/tls"] == []
    certificates = by_kind(objects, "Certificate")
    webhook_volumes = {v["name"]: v for v in pod(workloads(objects)["webhook"])["volumes"]}
    (serving,) = [c for c in certificates.values() if not c["spec"].get("isCA")]
    assert serving["spec"]["secretName"] == webhook_volumes["tls"]["secret"]["secretName"]
    service = next(s for s in by_kind(objects, "Service").values() if component(s) == "webhook")
    assert f"{service['metadata']['name']}.{namespace}.svc" in serving["spec"]["dnsNames"]
    for config in [o for o in objects if o["kind"].endswith("WebhookConfiguration")]:
        annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{namespace}/{serving['metadata']['name']}"
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    issuers = by_kind(objects, "Issuer")
    given = values["certManager"].get("issuerRef")
    if given:
        assert issuers == {} and serving["spec"]["issuerRef"]["name"] == given["name"]
        assert serving["spec"]["issuerRef"]["kind"] == given["kind"]
    else:
        # A self-signed root, a CA Issuer of it, and the serving certificate from that CA.
        ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
        root = certificates[next(c for c in certificates if certificates[c]["spec"].get("isCA"))]
        assert ca_issuer["spec"]["ca"]["secretName"] == root["spec"]["secretName"]
        assert "selfSigned" in issuers[root["spec"]["issuerRef"]["name"]]["spec"]
