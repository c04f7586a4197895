"""Every config file is a door: a malformed DeschedulerConfiguration, KubeSchedulerConfiguration or service config
ends in a clear error naming the field path and why — from ``allot sim run --config`` (exit 1, no traceback) and
from a service started with it as ``ALLOT_CONFIG_FILE`` (exit 2, no traceback). Unknown plugins, apiVersions and keys
are refused with the accepted names."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_cli.main import main

Doc = dict[str, Any]

DESCHEDULER: Doc = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerConfiguration",
    "deschedulingInterval": "60s",
    "profiles": [
        {
            "name": "koord-descheduler",
            "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
            "pluginConfig": [
                {
                    "name": "LowNodeLoad",
                    "args": {"lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60}},
                },
                {"name": "MigrationController", "args": {"defaultJobMode": "ReservationFirst"}},
            ],
        }
    ],
}
ARGS = ("profiles", 0, "pluginConfig", 0, "args")
LNL = "descheduler.profiles[0].pluginConfig[0].args"


def _set(doc: Doc, where: tuple[Any, ...], key: Any, value: Any) -> Doc:
    out = copy.deepcopy(doc)
    node: Any = out
    for step in where:
        node = node[step]
    node[key] = value
    return out


def _without(doc: Doc, key: str) -> Doc:
    return {k: v for k, v in doc.items() if k != key}


# (file content, field path the error names, words it says)
MALFORMED_DESCHEDULER: dict[str, tuple[Any, str, str]] = {
    "low above high": (_set(DESCHEDULER, ARGS, "lowThresholds", {"cpu": 70}), f"{LNL}.lowThresholds.cpu",
                       "must not exceed highThresholds.cpu"),
    "unknown apiVersion": (_set(DESCHEDULER, (), "apiVersion", "descheduler/v9"), "descheduler.apiVersion",
                           "supported: descheduler/v1alpha2"),
    "unknown apiVersion, no kind": (_without(_set(DESCHEDULER, (), "apiVersion", "descheduler/v9"), "kind"),
                                    "descheduler.apiVersion", "supported: descheduler/v1alpha2"),
    "kind typo": (_set(DESCHEDULER, (), "kind", "DeschedulerConfig"), "descheduler.kind",
                  "must be DeschedulerConfiguration"),
    "kind a list": (_set(DESCHEDULER, (), "kind", ["DeschedulerConfiguration"]), "descheduler.kind",
                    "must be DeschedulerConfiguration"),
    "unknown enabled plugin": (_set(DESCHEDULER, ("profiles", 0, "plugins", "balance"), "enabled",
                                    [{"name": "LowNodeLoadd"}]),
                               "descheduler.profiles[0].plugins.balance.enabled[0].name",
                               "unknown balance plugin; supported: LowNodeLoad, GPUDefrag"),
    "unknown disabled plugin": (_set(DESCHEDULER, ("profiles", 0, "plugins", "balance"), "disabled",
                                     [{"name": "LowNodeLod"}]),
                                "descheduler.profiles[0].plugins.balance.disabled[0].name", "supported: LowNodeLoad, GPUDefrag, *"),
    "plugin at the wrong point": (_set(DESCHEDULER, ("profiles", 0, "plugins"), "evict",
                                       {"enabled": [{"name": "LowNodeLoad"}]}),
                                  "descheduler.profiles[0].plugins.evict.enabled[0].name", "is a balance plugin"),
    "unknown extension point": (_set(DESCHEDULER, ("profiles", 0, "plugins"), "balancee", {}),
                                "descheduler.profiles[0].plugins.balancee",
                                "unknown field; supported: balance, deschedule, evict, filter"),
    "unknown top-level key": (_set(DESCHEDULER, (), "deschedulingIntervall", "10s"),
                              "descheduler.deschedulingIntervall", "unknown field; supported: "),
    "unknown key, no kind": (_set(_without(DESCHEDULER, "kind"), (), "dryrun", True), "descheduler.dryrun",
                             "unknown field; supported: "),
    "unknown arg": (_set(DESCHEDULER, ARGS, "lowThreshold", {"cpu": 1}), f"{LNL}.lowThreshold",
                    "unknown field; supported: "),
    "unknown pluginConfig name": (_set(DESCHEDULER, ("profiles", 0, "pluginConfig", 0), "name", "LowNodeLoads"),
                                  "descheduler.profiles[0].pluginConfig[0].name",
                                  "supported plugins: LowNodeLoad, GPUDefrag, MigrationController"),
    "args of another apiVersion": (_set(DESCHEDULER, ARGS, "apiVersion", "descheduler/v1alpha1"),
                                   f"{LNL}.apiVersion", "supported: descheduler/v1alpha2"),
    "args of another kind": (_set(DESCHEDULER, ARGS, "kind", "LowNodeLoadArg"), f"{LNL}.kind",
                             "must be LowNodeLoadArgs"),
    "threshold above 100": (_set(DESCHEDULER, ARGS, "highThresholds", {"cpu": 150}), f"{LNL}.highThresholds.cpu",
                            "percentage from 0 to 100"),
    "interval not a duration": (_set(DESCHEDULER, (), "deschedulingInterval", "soon"),
                                "descheduler.deschedulingInterval", "duration"),
    "profiles a string": (_set(DESCHEDULER, (), "profiles", "koord"), "descheduler.profiles", "must be a list"),
    "args a list": (_set(DESCHEDULER, ("profiles", 0, "pluginConfig", 0), "args", [1]), LNL, "must be an object"),
    "job mode unknown": (_set(DESCHEDULER, ("profiles", 0, "pluginConfig", 1, "args"), "defaultJobMode", "Later"),
                         "descheduler.profiles[0].pluginConfig[1].args.defaultJobMode", "must be ReservationFirst"),
    "wrapped, unknown key": ({"reservation-manager": {"descheduler": _set(DESCHEDULER, (), "profiless", [])}},
                             "descheduler.profiless", "unknown field; supported: "),
}  # fmt: skip


def _sim(tmp_path: Path, content: Any, capsys: Any) -> tuple[int, str]:
    config = tmp_path / "config.yaml"
    config.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    scenario = tmp_path / "empty.yaml"
    scenario.write_text("")
    with pytest.raises(SystemExit) as exit_code:
        main(["sim", "run", str(scenario), "--config", str(config)])
    return int(exit_code.value.code or 0), capsys.readouterr().err


def _refused_clearly(code: int, err: str, path: str, says: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err
    first, *rest = err.strip().splitlines()
    assert first.startswith("allot: error: "), err
    assert any(path in line and says in line for line in [first, *rest]), err


@pytest.mark.parametrize(
    ("content", "path", "says"), MALFORMED_DESCHEDULER.values(), ids=MALFORMED_DESCHEDULER
)
def test_a_malformed_descheduler_config_is_refused_with_its_field_path(
    tmp_path: Path, capsys: Any, content: Any, path: str, says: str
) -> None:
    _refused_clearly(*_sim(tmp_path, content, capsys), path, says)


def test_one_problem_is_one_line(tmp_path: Path, capsys: Any) -> None:
    code, err = _sim(tmp_path, _set(DESCHEDULER, (), "apiVersion", "descheduler/v9"), capsys)
    assert code == 1
    assert err.strip().splitlines() == [
        f"allot: error: {tmp_path / 'config.yaml'}: invalid DeschedulerConfiguration: descheduler.apiVersion: "
        "supported: descheduler/v1alpha2 (got 'descheduler/v9')"
    ]


def test_a_descheduler_part_outside_reservation_managers_config_is_named_as_such(
    tmp_path: Path, capsys: Any
) -> None:
    code, err = _sim(tmp_path, {"descheduler": DESCHEDULER}, capsys)
    assert code == 1 and "Traceback" not in err
    assert "descheduler: belongs to reservation-manager's config" in err


SCHEDULER = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "koord-scheduler",
            "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 1}]}},
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated"}}},
                {"name": "Coscheduling", "args": {"defaultTimeout": "600s"}},
            ],
        }
    ],
}
SCORE = ("profiles", 0, "plugins", "score", "enabled", 0)

MALFORMED_OTHERS: dict[str, tuple[Any, str, str]] = {
    "scheduler: unknown apiVersion": (_set(SCHEDULER, (), "apiVersion", "kubescheduler.config.k8s.io/v9"),
                                      "apiVersion", "must be one of kubescheduler.config.k8s.io/v1"),
    "scheduler: kind typo": (_set(SCHEDULER, (), "kind", "KubeSchedulerConfig"), "kind",
                             "must be KubeSchedulerConfiguration"),
    "scheduler: unknown plugin": (_set(SCHEDULER, SCORE, "name", "NodeResourcesFitt"),
                                  "profiles[0].plugins.score.enabled[0].name", "unknown plugin; known: AzureDiskLimits, CapacityScheduling"),
    "scheduler: weight not a number": (_set(SCHEDULER, SCORE, "weight", "heavy"),
                                       "scoring.nodeResourcesFit.weight", ""),
    "scheduler: timeout not a duration": (_set(SCHEDULER, ("profiles", 0, "pluginConfig", 1, "args"),
                                               "defaultTimeout", [1]),
                                          "profiles[0].pluginConfig[1].args.defaultTimeout", "duration"),
    "placement: unknown key": ({"scorring": {}}, "scorring", "unknown key; supported: "),
    "quota: unknown key": ({"quota-manager": {"enableRuntimeQuotas": True}}, "enableRuntimeQuotas",
                           "unknown quota config key; supported: "),
    "quota: unknown gate": ({"quota-manager": {"featureGates": {"Nope": True}}}, "featureGates.Nope",
                            "unknown feature gate; supported: "),
    "gang: unknown key": ({"gang-coordinator": {"defaultTimeout": 5}}, "defaultTimeout", "unknown"),
    "binder: unknown key": ({"binder": {"modes": "kubernetes"}}, "modes", "unknown key; supported: mode"),
    "node-reporter: unknown key": ({"node-reporter": {"agnt": {}}}, "agnt", "unknown key; supported: agent, scope"),
    "qos-enforcer: unknown key": ({"qos-enforcer": {"cgroupDrivr": "systemd"}}, "cgroupDrivr", "unknown"),
    "a service's config a list": ({"quota-manager": [1]}, "quota-manager", "must be a mapping"),
}  # fmt: skip


@pytest.mark.parametrize(("content", "path", "says"), MALFORMED_OTHERS.values(), ids=MALFORMED_OTHERS)
def test_a_malformed_scheduler_or_service_config_is_refused_with_its_field_path(
    tmp_path: Path, capsys: Any, content: Any, path: str, says: str
) -> None:
    _refused_clearly(*_sim(tmp_path, content, capsys), path, says)


def test_a_file_that_is_not_yaml_is_one_line(tmp_path: Path, capsys: Any) -> None:
    code, err = _sim(tmp_path, "profiles: [\n  - name: x\n bad", capsys)
    assert code == 1 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "cannot read config" in err


# -- a service started with a bad config file -------------------------------------------------------------------


def _service_main(name: str) -> Callable[[], None]:
    import importlib

    module = {"reservation-manager": "reservation_manager", "device-allocator": "device_allocator"}.get(
        name, name.replace("-", "_")
    )
    return importlib.import_module(f"{module}.main").main  # type: ignore[no-any-return]


SERVICE_FILES: dict[str, tuple[str, Any, str]] = {
    "descheduler file": ("reservation-manager", _set(DESCHEDULER, (), "apiVersion", "descheduler/v9"),
                         "descheduler.apiVersion: supported: descheduler/v1alpha2"),
    "descheduler, unknown plugin": ("reservation-manager",
                                    _set(DESCHEDULER, ("profiles", 0, "plugins", "balance"), "enabled",
                                         [{"name": "LowNodeLoadd"}]),
                                    "descheduler.profiles[0].plugins.balance.enabled[0].name"),
    "scheduler file": ("device-allocator", _set(SCHEDULER, SCORE, "weight", "heavy"),
                       "scoring.nodeResourcesFit.weight"),
    "placement": ("device-allocator", {"scoring": []}, "scoring"),
    "quota": ("quota-manager", {"delayEvictTime": "soon"}, "delayEvictTime"),
    "gang": ("gang-coordinator", {"queue": []}, "queue"),
    "reservation": ("reservation-manager", {"migration": {"maxMigratingPerNode": "x"}},
                    "migration.maxMigratingPerNode"),
    "binder": ("binder", {"mode": "kubernetes", "extra": 1}, "extra: unknown key"),
    "node-reporter": ("node-reporter", {"scope": ["n1"]}, "scope.node"),
    "qos-enforcer": ("qos-enforcer", {"cgroupDriver": 5}, "cgroupDriver"),
}  # fmt: skip


@pytest.mark.parametrize(("service", "content", "says"), SERVICE_FILES.values(), ids=SERVICE_FILES)
def test_a_service_with_a_bad_config_file_exits_2_with_one_clear_line(
    tmp_path: Path, monkeypatch: Any, capsys: Any, service: str, content: Any, says: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(content))
    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("ALLOT_CONFIG_FILE", str(config))
    for var in ("ALLOT_INSTANCE", "ALLOT_KUBE_MODE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exit_code:
        _service_main(service)()
    err = capsys.readouterr().err
    assert exit_code.value.code == 2, err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"allot-{service}: invalid configuration: ") and says in line, line


def test_replay_reads_each_services_config_file_as_the_service_does(tmp_path: Path) -> None:
    from allot_audit.replay_configs import load_configs

    (tmp_path / "reservation-manager.yaml").write_text(yaml.safe_dump(DESCHEDULER))
    (tmp_path / "gang-coordinator.yaml").write_text(yaml.safe_dump(SCHEDULER))
    configs = load_configs(tmp_path)
    assert configs["reservation-manager"].config == {"descheduler": DESCHEDULER}
    assert configs["gang-coordinator"].config == {"defaultTimeoutSeconds": 600}


def test_keys_that_are_not_strings_are_read_as_kubernetes_reads_them(tmp_path: Path, capsys: Any) -> None:
    """YAML keys such as ``1:`` or ``true:`` next to string keys: read as their text (YAML turned into JSON), so an
    unknown one is named like any other key — no comparison of an int with a str inside a parser."""
    text = yaml.safe_dump(DESCHEDULER) + "2: two\ntrue: yes\nwhen: 2024-01-01\n"
    code, err = _sim(tmp_path, text, capsys)
    _refused_clearly(code, err, "descheduler.2", "unknown field")
    assert "descheduler.true: unknown field" in err and "descheduler.when: unknown field" in err


def test_replay_refuses_a_bad_config_file_in_one_clear_error(tmp_path: Path) -> None:
    from allot_audit.replay_configs import load_configs
    from allot_intake.errors import InputError

    (tmp_path / "reservation-manager.yaml").write_text("profiles: [\n  - name: x\n bad")
    with pytest.raises(InputError, match=r"invalid reservation-manager config: .* is not valid YAML"):
        load_configs(tmp_path)


def test_a_descheduler_key_in_another_services_file_is_refused_not_ignored(tmp_path: Path) -> None:
    from allot_runtime.settings import read_config

    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"profiles": [], "scoring": {}}))
    assert read_config(tmp_path / "d.yaml", "reservation-manager") == {
        "descheduler": {"profiles": [], "scoring": {}}
    }
    assert read_config(tmp_path / "d.yaml", "device-allocator") == {"profiles": [], "scoring": {}}
    (tmp_path / "k.yaml").write_text(yaml.safe_dump(DESCHEDULER))
    assert read_config(tmp_path / "k.yaml", "device-allocator") == {}  # says what it is: not this service's


def test_a_key_given_twice_in_a_config_file_is_refused_not_the_last_one_taken(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """The same reader as manifests': two ``delayEvictTime`` keys are a mistake to point at, not a choice to make."""
    config = tmp_path / "config.yaml"
    config.write_text("delayEvictTime: 30s\nmonitorAllQuotas: true\ndelayEvictTime: 5m\n")
    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("ALLOT_CONFIG_FILE", str(config))
    for var in ("ALLOT_INSTANCE", "ALLOT_KUBE_MODE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SystemExit) as exit_code:
        _service_main("quota-manager")()
    err = capsys.readouterr().err
    assert exit_code.value.code == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("allot-quota-manager: invalid configuration: ALLOT_CONFIG_FILE: ")
    assert "the key 'delayEvictTime' stands twice (first on line 1)" in line
