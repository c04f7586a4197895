"""Fuzzing every config file kind: random mutations of valid configs (every ``*.config.yaml`` of the conformance
corpus and the examples, the deploy configs, the documented ones) and random structures, fed to what reads them —
reservation-manager's DeschedulerConfiguration, the KubeSchedulerConfiguration translation and the services' configs
it yields, every service's own config, and ``allot sim run --config``'s loading of a whole file. The parsers get
what the file loader hands over (``as_json``: YAML read as Kubernetes reads it, keys as strings), as services do. Each case is either
accepted or refused with :class:`InvalidConfig` (or ``InvalidInput``) whose every issue names a field path; any other
exception fails the test with the case that raised it. Short by default, 10,000 cases per kind in the slow run.
Generated keys are never the empty string (an issue about the key ``""`` would have an empty path)."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from allot_contracts.errors import InvalidConfig, InvalidInput
from allot_descheduling import is_descheduler_config
from allot_intake.errors import InputError
from allot_runtime.schedconfig import is_scheduler_config, translate
from allot_runtime.settings import as_json
from allot_sim.scenario import load_config
from allot_stack.pipeline import SERVICES, build
from allot_testing import fuzz

ROOT = Path(__file__).resolve().parents[2]
Doc = dict[str, Any]


def _files() -> list[Doc]:
    """The shipped ``--config`` files; a deploy config (one service's, named after it) as ``{service: config}``."""
    found = [*ROOT.glob("tests/conformance/**/*.config.yaml"), *ROOT.glob("examples/**/*.config.yaml")]
    docs = [yaml.safe_load(path.read_text()) for path in sorted(found)]
    for path in sorted([*ROOT.glob("deploy/*/config/*.yaml"), *ROOT.glob("deploy/*/base/config/*.yaml")]):
        docs.append({path.stem: yaml.safe_load(path.read_text())})
    return [d for d in docs if isinstance(d, dict)]


FILES = _files()
# the documented ones the files above do not cover (docs/enforcement.md, docs/gang.md, docs/kubernetes.md)
OWN: dict[str, list[Doc]] = {
    "qos-enforcer": [
        {
            "cgroupDriver": "systemd",
            "containerRuntime": "containerd",
            "cpusetSharePools": True,
            "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65},
            "resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": True}, "memoryQOS": {"enable": True}}},
            "cpuBurstStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": 100},
            "agent": {"dryRun": False, "reconcileSeconds": 30, "sampleSeconds": 5},
        }
    ],
    "gang-coordinator": [
        {
            "defaultTimeoutSeconds": 600,
            "defaultMatchPolicy": "once-satisfied",
            "defaultMode": "Strict",
            "queue": {"maxBypasses": 8, "maxBlockedSeconds": 120},
        }
    ],
    "binder": [{"mode": "kubernetes"}, {"mode": "standalone"}],
    "node-reporter": [
        {
            "scope": {"node": "n1"},
            "agent": {
                "discovery": True,
                "heartbeatIntervalSeconds": 10,
                "aggregateDurations": ["60s", "300s"],
            },
        }
    ],
}


def _services(doc: Doc) -> dict[str, Doc]:
    """A config file's parts, by service, as ``allot sim run --config`` reads it."""
    if is_scheduler_config(doc):
        return dict(translate(doc).services)
    if is_descheduler_config(doc):
        return {"reservation-manager": {"descheduler": doc}}
    if all(k in SERVICES for k in doc):
        return {str(k): dict(v or {}) for k, v in doc.items()}
    return {"device-allocator": doc}


DESCHEDULER = [p["descheduler"] for d in FILES for n, p in _services(d).items() if "descheduler" in p]
SCHEDULER = [d for d in FILES if is_scheduler_config(d)]
SERVICE_SEEDS: dict[str, list[Doc]] = {name: list(OWN.get(name, [])) for name in SERVICES}
for _doc in FILES:
    for _name, _part in _services(_doc).items():
        SERVICE_SEEDS[_name].append(_part)

# -- mutations -------------------------------------------------------------------------------------------------

WORDS = ["LowNodeLoad", "MigrationController", "*", "descheduler/v9", "descheduler/v1alpha2", "1m", "-5s", "0s",
         "100%", "cpu", "memory", "pods", "LeastAllocated", "MostAllocated", "NodeResourcesFit", "kubernetes",
         "ReservationFirst", "EvictDirectly", "systemd", "1e309", "", " ", "null", "true"]  # fmt: skip
# YAML keys: mostly strings, sometimes numbers or booleans (``1: x``, ``true: x``)
KEYS = (
    st.sampled_from([w for w in WORDS if w])
    | st.text(min_size=1, max_size=6)
    | st.sampled_from([0, 1, True, 2.5])
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, -1, 100, 101, 2**63, math.inf, -math.inf, math.nan, 0.5, 1e-320])
    | st.floats()
    | st.sampled_from(WORDS)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(doc: Any, draw: Callable[[Any], Any]) -> Any:
    path = draw(st.sampled_from(_paths(doc)))
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    here = parent[path[-1]] if path else doc
    op = draw(st.sampled_from(["replace", "delete", "add", "rename", "retype", "retype"]))
    if op == "add" and isinstance(here, dict):
        known = [str(k) + draw(st.sampled_from(["", "s", "x", "_"])) for k in here] or ["x"]
        here[draw(st.sampled_from(known) | KEYS)] = draw(VALUES)
    elif op == "add" and isinstance(here, list):
        here.append(draw(VALUES) if not here else copy.deepcopy(draw(st.sampled_from(here))))
    elif not path:
        return doc  # the file stays a mapping: a file that is not one is refused before any parser runs
    elif op == "delete":
        del parent[path[-1]]
    elif op == "rename" and isinstance(parent, dict):
        parent[str(path[-1]) + draw(st.sampled_from(["s", "x", "_", ""]))] = parent.pop(path[-1])
    elif op == "retype":
        parent[path[-1]] = draw(st.sampled_from([str(here), [here], {"value": here}, None, 0, "x", True]))
    else:
        parent[path[-1]] = draw(VALUES)
    return doc


@st.composite
def mutated(draw: Any, seeds: list[Doc]) -> Doc:
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        doc = _mutate(doc, draw)
    return doc


def configs(seeds: list[Doc]) -> Any:
    """Mostly mutations of valid configs; some random mappings."""
    return mutated(seeds) | st.dictionaries(KEYS, VALUES, max_size=4)


# -- the property --------------------------------------------------------------------------------------------------


def _outcome(load: Callable[[], object]) -> str:
    """``accepted``, or ``refused`` when every issue names a field path; anything else fails the case."""
    try:
        load()
    except InvalidConfig as exc:
        assert exc.issues and all(i.path and i.message for i in exc.issues), exc.issues
        return "refused"
    except InvalidInput as exc:
        assert exc.issues and all(path and message for path, message in exc.issues), exc.issues
        return "refused"
    return "accepted"


def _service(name: str, doc: Doc) -> None:
    """What a service checks before it starts: its processor's config (node-reporter's agent section too)."""
    build(name, doc)
    if name == "node-reporter":
        from node_reporter.adapters.agent import parse_agent_config

        parse_agent_config(doc.get("agent"), environ={})


def _services_of(doc: Doc) -> None:
    for name, part in translate(doc).services.items():
        build(name, part)


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_descheduler_configuration_is_accepted_or_refused_with_field_paths(examples: int) -> None:
    tally = fuzz.Tally("config: DeschedulerConfiguration")

    @fuzz.settings_for(examples)
    @given(configs(DESCHEDULER))
    def check(doc: Doc) -> None:
        tally.count(_outcome(lambda: build("reservation-manager", {"descheduler": as_json(doc)})))

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_kube_scheduler_configuration_is_accepted_or_refused_with_field_paths(examples: int) -> None:
    tally = fuzz.Tally("config: KubeSchedulerConfiguration")

    @fuzz.settings_for(examples)
    @given(configs(SCHEDULER))
    def check(doc: Doc) -> None:
        tally.count(_outcome(lambda: _services_of(as_json(doc))))

    check()


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_service_config_is_accepted_or_refused_with_field_paths(examples: int, service: str) -> None:
    tally = fuzz.Tally(f"config: {service}")

    @fuzz.settings_for(examples)
    @given(configs(SERVICE_SEEDS[service]))
    def check(doc: Doc) -> None:
        tally.count(_outcome(lambda: _service(service, as_json(doc))))

    check()


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_a_sim_config_file_is_loaded_or_refused_in_one_clear_error(examples: int, tmp_path: Path) -> None:
    """``allot sim run --config FILE``: whatever the file holds, the result is the configs or an InputError."""
    tally = fuzz.Tally("config: sim run --config")
    path = tmp_path / "config.yaml"

    @fuzz.settings_for(examples)
    @given(configs(FILES))
    def check(doc: Doc) -> None:
        path.write_text(yaml.safe_dump(doc))
        try:
            load_config(str(path))
        except InputError as exc:
            assert str(exc).startswith((f"{path}: ", "cannot read config")), exc
            tally.count("refused")
            return
        tally.count("accepted")

    check()


def test_the_seeds_are_valid_configs() -> None:
    """The mutations start from configs that are accepted, so that a refusal is the mutation's doing."""
    assert DESCHEDULER and SCHEDULER and all(SERVICE_SEEDS.values())
    for doc in DESCHEDULER:
        assert (
            _outcome(functools.partial(build, "reservation-manager", {"descheduler": doc})) == "accepted"
        ), doc
    for doc in SCHEDULER:
        assert _outcome(functools.partial(_services_of, doc)) == "accepted", doc
    for name, seeds in SERVICE_SEEDS.items():
        for doc in seeds:
            assert _outcome(functools.partial(_service, name, doc)) == "accepted", (name, doc)
