"""Every object of a shipped kind that Allot writes is one upstream's API server accepts (validated against the
shipped CRDs as the API server validates them, see conftest.CustomResources). Each is produced here by the code
that builds it, over real inputs:

- node-reporter's discovery: the ``Device`` and ``NodeResourceTopology`` of each captured machine
  (services/node-reporter/tests/fixtures/machines), as node-reporter records them;
- through the simulator, every example scenario and conformance case, then 5 minutes more of time (so the timers
  fire: quota status sync, expiries, timeouts). Over the resulting log:
  - reservation-manager's ``status`` of every Reservation and PodMigrationJob (``adapters.kube.wanted_statuses``,
    what its writer PATCHes onto ``…/status``), after every input, rebuilt as the service rebuilds;
  - the binder's PodGroup ``status`` (``notices.Renderer.group_status``) after every event that changes one;
  - the ElasticQuota merge patches (annotations and ``status.used``) quota-manager publishes and the binder applies.
  Each is merged (JSON merge patch, as written) onto the object as it was applied and the result validated.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allot_contracts.envelope import RecordedEvent
from allot_contracts.events import (
    MigrationApplied,
    PodGroupApplied,
    QuotaApplied,
    QuotaStatusPublished,
    ReservationApplied,
)
from allot_runtime.processor import Host
from allot_sim.scenario import load_config, run
from allot_stack.pipeline import build
from allot_testing.fake_kube import merge_patch
from binder.notices import Renderer
from node_reporter.discovery import decode_answer, discover
from reservation_manager.adapters.kube import GROUP, wanted_statuses

REPO = Path(__file__).resolve().parents[2]
MACHINES = REPO / "services" / "node-reporter" / "tests" / "fixtures" / "machines"
SIDE_FILES = (".expected.yaml", ".config.yaml")
SCENARIOS = sorted(
    p
    for root in (REPO / "examples", REPO / "tests" / "conformance")
    for p in root.rglob("*.yaml")
    if not p.name.endswith(SIDE_FILES)
)
SETTLE_SECONDS = 300
QUOTA = "scheduling.sigs.k8s.io/v1alpha1"

Obj = dict[str, Any]
Written = tuple[str, Obj]  # (what wrote it, the object as the API server would hold it)


def _problems(custom_resources: Any, written: list[Written]) -> list[str]:
    found = []
    for who, obj in written:
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        found += [f"{who}: {obj['kind']} {name}: {p}" for p in custom_resources.problems(obj)]
    return found


# -- node-reporter -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("machine", sorted(p.name for p in MACHINES.iterdir() if p.is_dir()))
def test_node_reporters_device_and_topology_validate(machine: str, custom_resources: Any) -> None:
    root = str(MACHINES / machine)
    found = discover(
        machine,
        sys_root=root,
        proc_root=root,
        nvml=decode_answer((MACHINES / machine / "nvml.json").read_bytes()),
    )
    written = [("node-reporter discovery", found.device), ("node-reporter discovery", found.topology)]
    assert [o["kind"] for _, o in written] == ["Device", "NodeResourceTopology"]
    problems = _problems(custom_resources, written)
    assert not problems, "\n".join(problems)


# -- what the services write back ----------------------------------------------------------------------------------


def _applied(events: list[RecordedEvent]) -> dict[tuple[str, str], Obj]:
    """(kind, key) -> the manifest as last applied (what the status is written onto)."""
    out: dict[tuple[str, str], Obj] = {}
    for record in events:
        event = record.decode()
        match event:
            case ReservationApplied(reservation=ref, manifest=manifest):
                out[("Reservation", ref.key)] = manifest
            case MigrationApplied(job=ref, manifest=manifest):
                out[("PodMigrationJob", ref.key)] = manifest
            case PodGroupApplied(group=ref, manifest=manifest):
                out[("PodGroup", ref.key)] = manifest
            case QuotaApplied(quota=ref, manifest=manifest):
                out[("ElasticQuota", ref.key)] = manifest
            case _:
                pass
    return out


def reservation_statuses(events: list[RecordedEvent], config: Obj) -> Iterator[tuple[str, str, Obj]]:
    """(kind, name, status) of every Reservation and PodMigrationJob reservation-manager would write, after every
    input, over a processor rebuilt from the log as the service rebuilds it."""
    host = Host(build("reservation-manager", config))
    outputs: dict[str, list[RecordedEvent]] = {}
    for record in events:
        if record.producer == host.name and record.causation_id:
            outputs.setdefault(record.causation_id, []).append(record)
    kinds = {f"{GROUP}/reservations": "Reservation", f"{GROUP}/podmigrationjobs": "PodMigrationJob"}
    for record in events:
        if record.type in host.interests and record.producer != host.name:
            host.apply_recorded(record, outputs.get(record.event_id, ()))
            for path, (status, _) in wanted_statuses(host.processor.engine).items():
                collection, _, name = path.rpartition("/")
                yield kinds[collection], name, status


def pod_group_statuses(events: list[RecordedEvent]) -> Iterator[tuple[str, Obj]]:
    """(key, status) of every PodGroup status the binder writes, after every event that changes one."""
    renderer = Renderer()
    for record in events:
        if record.type in renderer.interests:
            for key in renderer.render(record.decode()).pod_groups:
                status = renderer.group_status(key)
                if status is not None:
                    yield key, status


def quota_patches(events: list[RecordedEvent]) -> Iterator[tuple[str, Obj]]:
    for record in events:
        event = record.decode()
        if isinstance(event, QuotaStatusPublished):
            yield event.quota.key, event.patch


def written_by_services(scenario: Path) -> list[Written]:
    config_file = scenario.with_name(scenario.name.removesuffix(".yaml") + ".config.yaml")
    configs = load_config(str(config_file)) if config_file.exists() else {}
    sim, _, _ = run(str(scenario), config=configs)
    sim.advance(SETTLE_SECONDS)
    events = list(sim.store.events)
    applied = _applied(events)
    written: list[Written] = []
    for kind, name, status in reservation_statuses(events, configs.get("reservation-manager", {})):
        written.append(("reservation-manager status", merge_patch(applied[(kind, name)], {"status": status})))
    for key, status in pod_group_statuses(events):
        written.append(
            ("binder PodGroup status", merge_patch(applied[("PodGroup", key)], {"status": status}))
        )
    for key, patch in quota_patches(events):
        # the default and root quotas are not applied by users: Koordinator creates them, bare
        namespace, _, name = key.partition("/")
        bare = {
            "apiVersion": QUOTA,
            "kind": "ElasticQuota",
            "metadata": {"namespace": namespace, "name": name},
        }
        base = applied.get(("ElasticQuota", key), bare)
        written.append(("binder ElasticQuota patch", merge_patch(base, patch)))
    return written


@pytest.fixture(scope="module")
def written() -> dict[Path, list[Written]]:
    return {scenario: written_by_services(scenario) for scenario in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: str(p.relative_to(REPO)))
def test_what_the_services_write_back_validates(
    scenario: Path, written: dict[Path, list[Written]], custom_resources: Any
) -> None:
    problems = _problems(custom_resources, written[scenario])
    assert not problems, "\n".join(problems)


def test_every_kind_allot_writes_back_is_checked(written: dict[Path, list[Written]]) -> None:
    kinds = {(who, obj["kind"]) for objects in written.values() for who, obj in objects}
    assert kinds == {
        ("reservation-manager status", "Reservation"),
        ("reservation-manager status", "PodMigrationJob"),
        ("binder PodGroup status", "PodGroup"),
        ("binder ElasticQuota patch", "ElasticQuota"),
    }
    phases = {
        (obj["kind"], obj["status"].get("phase"))
        for objects in written.values()
        for _, obj in objects
        if obj["kind"] in ("Reservation", "PodMigrationJob")
    }
    assert {("Reservation", "Available"), ("PodMigrationJob", "Succeeded")} <= phases
