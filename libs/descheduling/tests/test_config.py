"""DeschedulerConfiguration / LowNodeLoadArgs: defaults, pools inheriting the top-level args, every refusal with its
field path."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from allot_descheduling import DeschedulerConfigError, parse_config


def config(args: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    plugin_config: list[dict[str, Any]] = []
    if args is not None:
        plugin_config.append({"name": "LowNodeLoad", "args": args})
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "profiles": [
            {
                "name": "p",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": plugin_config,
            }
        ],
        **top,
    }


BASIC = {"lowThresholds": {"cpu": 20, "memory": 30}, "highThresholds": {"cpu": 60, "memory": 75.5}}


def test_defaults_follow_upstream() -> None:
    cfg = parse_config(config(BASIC))
    assert cfg.interval_us == 60_000_000 and not cfg.dry_run and cfg.enabled
    profile = cfg.profiles[0]
    assert profile.job_mode == "" and profile.job_ttl_us == 0  # the migration controller's defaults
    assert not profile.evict_local_storage
    args = profile.low_node_load
    assert args is not None and args.node_fit and args.expiration_us == 180_000_000
    (pool,) = args.pools
    assert pool.name == "p"
    assert pool.high == {"cpu": Fraction(60), "memory": Fraction("75.5")}
    assert pool.anomaly.consecutive_abnormalities == 5 and pool.anomaly.consecutive_normalities == 3
    assert pool.anomaly.timeout_us == 60_000_000
    assert pool.weights == {"cpu": 1, "memory": 1}


def test_pools_take_what_they_do_not_set_from_the_top_level_args() -> None:
    args = {
        **BASIC,
        "anomalyCondition": {"consecutiveAbnormalities": 2},
        "nodePools": [
            {
                "name": "gpu",
                "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                "highThresholds": {"cpu": 80, "memory": 90},
                "lowThresholds": {"cpu": 10, "memory": 10},
            },
            {"name": "rest", "prodLowThresholds": {"cpu": 10}, "prodHighThresholds": {"cpu": 50}},
        ],
    }
    gpu, rest = parse_config(config(args)).profiles[0].low_node_load.pools  # type: ignore[union-attr]
    assert gpu.high["cpu"] == 80 and gpu.anomaly.consecutive_abnormalities == 2
    assert rest.high == {"cpu": 60, "memory": Fraction("75.5")} and rest.prod_high == {"cpu": 50}


def test_a_profile_without_lownodeload_enabled_or_configured_does_nothing() -> None:
    cfg = parse_config({"profiles": [{"name": "p"}]})
    assert not cfg.enabled
    disabled = config(BASIC)
    disabled["profiles"][0]["plugins"] = {"balance": {"disabled": [{"name": "LowNodeLoad"}]}}
    assert not parse_config(disabled).enabled


def test_migration_controller_args() -> None:
    raw = config(BASIC)
    raw["profiles"][0]["pluginConfig"].append(
        {
            "name": "MigrationController",
            "args": {
                "defaultJobMode": "EvictDirectly",
                "defaultJobTTL": "10m",
                "evictLocalStoragePods": True,
            },
        }
    )
    profile = parse_config(raw).profiles[0]
    assert (profile.job_mode, profile.job_ttl_us, profile.evict_local_storage) == (
        "EvictDirectly",
        600_000_000,
        True,
    )


ARGS = "descheduler.profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (config({**BASIC, "highThresholds": {"cpu": 60}}), f"{ARGS}.highThresholds"),
        (config({"lowThresholds": {"cpu": 20}}), f"{ARGS}.highThresholds"),
        (config({**BASIC, "lowThresholds": {"cpu": 70, "memory": 30}}), f"{ARGS}.lowThresholds.cpu"),
        (config({**BASIC, "highThresholds": {"cpu": 160, "memory": 80}}), f"{ARGS}.highThresholds.cpu"),
        (config({**BASIC, "highThresholds": {"cpu": "60", "memory": 80}}), f"{ARGS}.highThresholds.cpu"),
        (config({**BASIC, "prodHighThresholds": {"cpu": 60}}), f"{ARGS}.prodLowThresholds"),
        (
            config({**BASIC, "anomalyCondition": {"consecutiveAbnormalities": 0}}),
            f"{ARGS}.anomalyCondition.consecutiveAbnormalities",
        ),
        (config({**BASIC, "anomalyCondition": {"timeout": "soon"}}), f"{ARGS}.anomalyCondition.timeout"),
        (
            config(
                {
                    **BASIC,
                    "nodePools": [{"name": 3, "highThresholds": {"cpu": 1}, "lowThresholds": {"cpu": 1}}],
                }
            ),
            f"{ARGS}.nodePools[0].name",
        ),
        (config({**BASIC, "nodePools": [{"name": "a", "colour": "red"}]}), f"{ARGS}.nodePools[0].colour"),
        (
            config({**BASIC, "evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}),
            f"{ARGS}.evictableNamespaces",
        ),
        (
            config({**BASIC, "nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}),
            f"{ARGS}.nodeSelector.matchExpressions[0].operator",
        ),
        (config({**BASIC, "numberOfNodes": -1}), f"{ARGS}.numberOfNodes"),
        (config({**BASIC, "surprise": 1}), f"{ARGS}.surprise"),
        (config(BASIC, deschedulingInterval="often"), "descheduler.deschedulingInterval"),
        (config(BASIC, kind="KubeSchedulerConfiguration"), "descheduler.kind"),
        (config(None), "descheduler.profiles[0].pluginConfig"),
        (
            {"profiles": [{"name": "p", "pluginConfig": [{"name": "HighNodeLoad"}]}]},
            "descheduler.profiles[0].pluginConfig[0].name",
        ),
        ({"profiles": [{"pluginConfig": []}]}, "descheduler.profiles[0].name"),
    ],
    ids=[
        "different-resources",
        "high-missing",
        "low-above-high",
        "above-100",
        "not-a-number",
        "prod-half-given",
        "zero-abnormalities",
        "bad-timeout",
        "pool-name-not-a-string",
        "pool-unknown-field",
        "include-and-exclude",
        "bad-selector",
        "negative-number-of-nodes",
        "unknown-arg",
        "bad-interval",
        "wrong-kind",
        "enabled-without-args",
        "unknown-plugin",
        "profile-without-name",
    ],
)
def test_bad_configuration_names_the_field(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(DeschedulerConfigError) as err:
        parse_config(raw)
    assert path in [i.path for i in err.value.issues], err.value.issues


# upstream's config/manager/descheduler-config.yaml (koord-descheduler-config), as koord-descheduler runs with it
UPSTREAM = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
enableContentionProfiling: true
enableProfiling: true
healthzBindAddress: 0.0.0.0:10251
metricsBindAddress: 0.0.0.0:10251
leaderElection:
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: koordinator-system
deschedulingInterval: 10s
dryRun: false
profiles:
- name: koord-descheduler
  plugins:
    deschedule:
      disabled:
        - name: "*"
    evict:
      disabled:
        - name: "*"
      enabled:
        - name: MigrationController
  pluginConfig:
  - name: MigrationController
    args:
      apiVersion: descheduler/v1alpha2
      kind: MigrationControllerArgs
      evictionPolicy: Eviction
      namespaces:
        exclude:
          - kube-system
          - koordinator-system
      evictQPS: "10"
      evictBurst: 1
  - name: LowNodeLoad
    args:
      apiVersion: descheduler/v1alpha2
      kind: LowNodeLoadArgs
      evictableNamespaces:
        exclude:
          - kube-system
          - koordinator-system
      useDeviationThresholds: false
      lowThresholds:
        cpu: 45
        memory: 55
      highThresholds:
        cpu: 75
        memory: 80
"""


def test_upstreams_shipped_configuration_is_read_and_configures_the_migration_controller() -> None:
    import yaml

    config = parse_config(yaml.safe_load(UPSTREAM))
    assert config.interval_us == 10_000_000
    (prof,) = config.profiles
    assert prof.low_node_load is not None
    assert prof.low_node_load.exclude_namespaces == ("kube-system", "koordinator-system")
    # the migration limits and filters are the migration controller's (reservation-manager's migration: settings)
    assert config.migration == {
        "evictBurst": 1,
        "evictQPS": "10",
        "namespaces": {"exclude": ["kube-system", "koordinator-system"]},
    }


def test_eviction_caps_and_a_global_node_selector_are_read() -> None:
    raw = config(BASIC)
    raw.update(
        maxNoOfPodsToEvictPerNode=2, maxNoOfPodsToEvictTotal=5, nodeSelector={"matchLabels": {"pool": "a"}}
    )
    got = parse_config(raw)
    assert got.caps == (2, 0, 5)
    assert got.profiles[0].low_node_load is not None
    assert got.profiles[0].low_node_load.node_selector == (("pool", "In", ("a",)),)


def test_profiles_must_agree_on_the_one_migration_controller() -> None:
    profiles = [
        {"name": n, "pluginConfig": [{"name": "MigrationController", "args": {"maxMigratingPerNode": v}}]}
        for n, v in (("a", 1), ("b", 2))
    ]
    with pytest.raises(DeschedulerConfigError) as err:
        parse_config({"profiles": profiles})
    assert err.value.issues[0].path == "descheduler.profiles[1].pluginConfig[0].args"
