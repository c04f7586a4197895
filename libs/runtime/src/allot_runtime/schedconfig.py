"""Koordinator's ``KubeSchedulerConfiguration`` accepted as Allot's configuration.

A file a koord-scheduler runs with (``kubescheduler.config.k8s.io/v1`` or ``v1beta3``) maps onto the decision
configs of the services that hold each plugin's logic:

=============================== =============================================== ==================================
Upstream                        Allot setting                                   Service
=============================== =============================================== ==================================
score weight of NodeResourcesFit ``scoring.nodeResourcesFit.weight``            device-allocator
  NodeNUMAResource, DeviceShare, ``scoring.nodeNUMAResource``/``deviceShare``/
  NodeResourcesFitPlus,          ``nodeResourcesFitPlus``/
  ScarceResourceAvoidance        ``scarceResourceAvoidance`` ``.weight``
                                 (a disabled score plugin: weight 0)
NodeResourcesFitArgs,           ``scoring.<plugin>.strategy`` and ``resources``  device-allocator
  NodeNUMAResourceArgs,           (``scoringStrategy.type``/``resources``);
  DeviceShareArgs                 ``cpu.defaultBindPolicy``; NodeNUMAResourceArgs'
                                  ``numaScoringStrategy``: ``scoring.numaNodes``
DeviceShareArgs                 ``devices.gpuShareUnsupportedModels``            device-allocator
  ``gpuShareUnsupportedModels``
NodeResourcesFitPlusArgs        ``scoring.nodeResourcesFitPlus.resources``       device-allocator
ScarceResourceAvoidanceArgs     ``scoring.scarceResourceAvoidance.resources``    device-allocator
ElasticQuotaArgs                the same keys                                   quota-manager
LoadAwareSchedulingArgs         ``loadAware`` (the same keys; the score weight   device-allocator
                                  as ``loadAware.weight``)
CoschedulingArgs                ``defaultTimeout`` → ``defaultTimeoutSeconds``   gang-coordinator
podInitialBackoffSeconds,       ``retryInitialBackoffSeconds``,                  gang-coordinator
  podMaxBackoffSeconds            ``retryMaxBackoffSeconds``
=============================== =============================================== ==================================

Fields upstream defines but Allot does not act on (ReservationArgs, ``allowCustomizeEstimation``, other extension
points, leader election, client connection, parallelism, …) are accepted and reported as warnings. A field that is
not upstream's — a typo — is an error naming its path; so is a plugin name nobody knows. One profile is supported:
its ``schedulerName`` is the name of Allot's scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue, checked_list, checked_object
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_placement.loadaware_args import ARGS_KEYS as LOAD_AWARE_ARGS

API_GROUP = "kubescheduler.config.k8s.io/"
API_VERSIONS = (f"{API_GROUP}v1", f"{API_GROUP}v1beta3")
KIND = "KubeSchedulerConfiguration"

_TOP = {
    "apiVersion", "kind", "profiles", "extenders", "leaderElection", "clientConnection", "parallelism",
    "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds", "healthzBindAddress",
    "metricsBindAddress", "enableProfiling", "enableContentionProfiling", "delayCacheUntilActive",
}  # fmt: skip
_NOT_ACTED = _TOP - {
    "apiVersion",
    "kind",
    "profiles",
    "extenders",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
}
_PROFILE = {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
_POINTS = {
    "multiPoint", "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve",
    "permit", "preBind", "bind", "postBind",
}  # fmt: skip
KNOWN_PLUGINS = {
    # Kubernetes
    "PrioritySort", "NodeResourcesFit", "NodeResourcesBalancedAllocation", "NodeAffinity", "NodeName", "NodePorts",
    "NodeUnschedulable", "TaintToleration", "InterPodAffinity", "PodTopologySpread", "ImageLocality",
    "VolumeBinding", "VolumeRestrictions", "VolumeZone", "NodeVolumeLimits", "EBSLimits", "GCEPDLimits",
    "AzureDiskLimits", "DefaultPreemption", "DefaultBinder", "SchedulingGates", "DynamicResources",
    # Koordinator and scheduler-plugins
    "NodeNUMAResource", "DeviceShare", "ElasticQuota", "Coscheduling", "Reservation", "LoadAwareScheduling",
    "NodeResourcesFitPlus", "ScarceResourceAvoidance", "DefaultPreBind", "CapacityScheduling", "SchedulingHint",
}  # fmt: skip
_UNKNOWN_PLUGIN = f"unknown plugin; known: {', '.join(sorted(KNOWN_PLUGINS))}"
_SCORED = {
    "NodeResourcesFit": "nodeResourcesFit",
    "NodeNUMAResource": "nodeNUMAResource",
    "DeviceShare": "deviceShare",
    "NodeResourcesFitPlus": "nodeResourcesFitPlus",
    "ScarceResourceAvoidance": "scarceResourceAvoidance",
}
# Upstream plugin args: every field upstream defines. ``acted`` ones are mapped below; the rest are warnings.
_ARGS: dict[str, tuple[set[str], set[str]]] = {  # plugin -> (acted on, known but not acted on)
    "NodeResourcesFit": ({"scoringStrategy"}, {"ignoredResources", "ignoredResourceGroups"}),
    "NodeNUMAResource": ({"scoringStrategy", "numaScoringStrategy", "defaultCPUBindPolicy"}, set()),
    "DeviceShare": (
        {"scoringStrategy", "gpuShareUnsupportedModels"},
        {
            "allocator",
            "numaScoringStrategy",
            "disableDeviceNUMATopologyAlignment",
            "gpuSharedResourceTemplatesConfig",
        },
    ),
    "SchedulingHint": (set(), {"maxHintNodes"}),
    "NodeResourcesFitPlus": ({"resources"}, set()),
    "ScarceResourceAvoidance": ({"resources"}, set()),
    "ElasticQuota": (
        {
            "quotaGroupNamespace",
            "enableCheckParentQuota",
            "delayEvictTime",
            "revokePodInterval",
            "monitorAllQuotas",
            "enableRuntimeQuota",
            "enableMinQuotaScale",
            "disableDefaultQuotaPreemption",
            "systemQuotaGroupMax",
            "defaultQuotaGroupMax",
        },
        {"enableQueueHint", "hookPlugins"},
    ),  # fmt: skip
    "Coscheduling": ({"defaultTimeout"}, {"controllerWorkers", "skipCheckScheduleCycle", "enablePreemption"}),
    "Reservation": (
        set(),
        {
            "enablePreemption",
            "minCandidateNodesPercentage",
            "minCandidateNodesAbsolute",
            "controllerWorkers",
            "gcDurationSeconds",
            "enableLazyReservationRestore",
        },
    ),  # fmt: skip
    "LoadAwareScheduling": (set(LOAD_AWARE_ARGS), set()),
}
_STRATEGIES = ("LeastAllocated", "MostAllocated")


class SchedulerConfig(msgspec.Struct, frozen=True, kw_only=True):
    scheduler_name: str
    services: dict[str, JsonObject]  # service name -> its decision config
    warnings: list[FieldIssue]


@dataclass
class _ServiceConfigs:
    """The decision configs a translation builds, one per service that reads the scheduler's settings."""

    placement: JsonObject = field(default_factory=lambda: {"scoring": {}})  # device-allocator
    quota: JsonObject = field(default_factory=dict)  # quota-manager
    gang: JsonObject = field(default_factory=dict)  # gang-coordinator


class SchedulerConfigError(InvalidConfig):
    pass


def is_scheduler_config(data: object) -> bool:
    """Whether a config file holds a ``KubeSchedulerConfiguration`` (its kind or an ``apiVersion`` of its group, so
    that a wrong version or kind is reported as this config's)."""
    if not isinstance(data, dict):
        return False
    version = data.get("apiVersion")
    return data.get("kind") == KIND or (isinstance(version, str) and version.startswith(API_GROUP))


def _mapping(value: object, path: str, issues: list[FieldIssue]) -> JsonObject:
    return checked_object(value, path, issues, message="must be a mapping")


def _section(config: JsonObject, key: str) -> JsonObject:
    """The mapping under ``key`` of a config this translation builds (an empty one the first time)."""
    section = config.setdefault(key, {})
    assert isinstance(section, dict), key  # only this module writes these keys, always as mappings
    return section


def _unknown(value: JsonObject, allowed: set[str], path: str, issues: list[FieldIssue]) -> None:
    for key in sorted(set(value) - allowed, key=str):
        issues.append(
            FieldIssue(
                path=f"{path}.{key}" if path else str(key),
                message=f"unknown field; known: {', '.join(sorted(allowed))}",
            )
        )


def _strategy(raw: JsonValue, path: str, issues: list[FieldIssue]) -> JsonObject:
    strategy = _mapping(raw, path, issues)
    _unknown(strategy, {"type", "resources", "requestedToCapacityRatio"}, path, issues)
    out: JsonObject = {}
    kind = strategy.get("type")
    if kind is not None:
        if kind not in _STRATEGIES:
            issues.append(
                FieldIssue(
                    path=f"{path}.type", message=f"{kind!r} is not supported; one of {', '.join(_STRATEGIES)}"
                )
            )
        else:
            out["strategy"] = kind
    resources = strategy.get("resources")
    if resources is not None:
        if not isinstance(resources, list):
            issues.append(FieldIssue(path=f"{path}.resources", message="must be a list of {name, weight}"))
        else:
            weights: JsonObject = {}
            for i, item in enumerate(resources):
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(item, dict) or not isinstance(name, str):
                    issues.append(FieldIssue(path=f"{path}.resources[{i}]", message="needs a name"))
                    continue
                _unknown(item, {"name", "weight"}, f"{path}.resources[{i}]", issues)
                weights[name] = item.get("weight", 1)
            out["resources"] = weights
    return out


def translate(data: object) -> SchedulerConfig:
    """The decision configs a ``KubeSchedulerConfiguration`` means; :class:`SchedulerConfigError` lists every
    problem with its path."""
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    doc = _mapping(data, "", issues)
    if doc.get("apiVersion") not in API_VERSIONS:
        issues.append(FieldIssue(path="apiVersion", message=f"must be one of {', '.join(API_VERSIONS)}"))
    if doc.get("kind") != KIND:
        issues.append(FieldIssue(path="kind", message=f"must be {KIND}"))
    _unknown(doc, _TOP, "", issues)
    for key in sorted(set(doc) & _NOT_ACTED):
        warnings.append(FieldIssue(path=key, message="accepted; Allot does not act on it"))
    if doc.get("extenders"):
        issues.append(FieldIssue(path="extenders", message="scheduler extenders are not supported"))
    configs = _ServiceConfigs()
    placement, quota, gang = configs.placement, configs.quota, configs.gang
    for key, target in (
        ("podInitialBackoffSeconds", "retryInitialBackoffSeconds"),
        ("podMaxBackoffSeconds", "retryMaxBackoffSeconds"),
    ):
        if key in doc:
            gang[target] = doc[key]
    profiles = doc.get("profiles") or []
    if not isinstance(profiles, list) or len(profiles) > 1:
        issues.append(FieldIssue(path="profiles", message="Allot runs exactly one profile"))
        profiles = []
    scheduler = "allot-scheduler"
    for p, raw in enumerate(profiles):
        path = f"profiles[{p}]"
        profile = _mapping(raw, path, issues)
        _unknown(profile, _PROFILE, path, issues)
        scheduler = str(profile.get("schedulerName") or scheduler)
        _plugins(profile, path, placement, issues, warnings)
        _plugin_configs(profile, path, configs, issues, warnings)
    if issues:
        raise SchedulerConfigError(issues)
    if not placement["scoring"]:
        placement.pop("scoring")
    services = {"device-allocator": placement, "quota-manager": quota, "gang-coordinator": gang}
    return SchedulerConfig(scheduler_name=scheduler, services=services, warnings=warnings)


def _plugins(
    profile: JsonObject,
    path: str,
    placement: JsonObject,
    issues: list[FieldIssue],
    warnings: list[FieldIssue],
) -> None:
    """The plugins a profile enables or disables: the weights of the scores Allot computes; other extension
    points are accepted with a warning."""
    plugins = _mapping(profile.get("plugins"), f"{path}.plugins", issues)
    _unknown(plugins, _POINTS, f"{path}.plugins", issues)
    ignored_points = []
    for point, raw_set in sorted(plugins.items()):
        sets = _mapping(raw_set, f"{path}.plugins.{point}", issues)
        _unknown(sets, {"enabled", "disabled"}, f"{path}.plugins.{point}", issues)
        for which in ("enabled", "disabled"):
            entries = checked_list(sets.get(which), f"{path}.plugins.{point}.{which}", issues)
            for i, entry in enumerate(entries):
                where = f"{path}.plugins.{point}.{which}[{i}]"
                if not isinstance(entry, dict):
                    issues.append(FieldIssue(path=where, message="must be {name, weight}"))
                    continue
                _unknown(entry, {"name", "weight"}, where, issues)
                name = entry.get("name")
                if not isinstance(name, str):
                    issues.append(FieldIssue(path=f"{where}.name", message="must be a plugin name"))
                elif name != "*" and name not in KNOWN_PLUGINS:
                    issues.append(FieldIssue(path=f"{where}.name", message=_UNKNOWN_PLUGIN, value=name))
                elif point == "score" and name in _SCORED:
                    section = _section(_section(placement, "scoring"), _SCORED[name])
                    section["weight"] = entry.get("weight", 1) if which == "enabled" else 0
                elif point == "score" and name == "LoadAwareScheduling":
                    _section(placement, "loadAware")["weight"] = (
                        entry.get("weight", 1) if which == "enabled" else 0
                    )
                elif point != "score":
                    ignored_points.append(point)
    if ignored_points:
        warnings.append(
            FieldIssue(
                path=f"{path}.plugins",
                message="accepted; Allot runs its fixed pipeline, so "
                + ", ".join(sorted(set(ignored_points)))
                + " settings change nothing",
            )
        )


def _plugin_configs(
    profile: JsonObject,
    path: str,
    services: _ServiceConfigs,
    issues: list[FieldIssue],
    warnings: list[FieldIssue],
) -> None:
    """The args of a profile's plugins, mapped onto the services' configs (args Allot knows but does not act
    on are accepted with a warning)."""
    configs = checked_list(profile.get("pluginConfig"), f"{path}.pluginConfig", issues)
    for c, raw_config in enumerate(configs):
        where = f"{path}.pluginConfig[{c}]"
        entry = _mapping(raw_config, where, issues)
        _unknown(entry, {"name", "args"}, where, issues)
        name = entry.get("name")
        if not isinstance(name, str):
            issues.append(FieldIssue(path=f"{where}.name", message="must be a plugin name"))
            continue
        if name not in _ARGS:
            if name in KNOWN_PLUGINS:
                warnings.append(
                    FieldIssue(path=f"{where}.name", message=f"{name} args: accepted, not acted on")
                )
            else:
                issues.append(FieldIssue(path=f"{where}.name", message=_UNKNOWN_PLUGIN, value=name))
            continue
        args = dict(_mapping(entry.get("args"), f"{where}.args", issues))
        args.pop("apiVersion", None)
        args.pop("kind", None)
        acted, known = _ARGS[str(name)]
        _unknown(args, acted | known, f"{where}.args", issues)
        for key in sorted(set(args) & known):
            warnings.append(
                FieldIssue(path=f"{where}.args.{key}", message="accepted; Allot does not act on it")
            )
        _map_args(str(name), args, f"{where}.args", services, issues)


def _map_args(
    name: str, args: JsonObject, path: str, services: _ServiceConfigs, issues: list[FieldIssue]
) -> None:
    placement, quota, gang = services.placement, services.quota, services.gang
    scoring = _section(placement, "scoring")
    if name in ("NodeResourcesFit", "NodeNUMAResource", "DeviceShare") and "scoringStrategy" in args:
        _section(scoring, _SCORED[name]).update(
            _strategy(args["scoringStrategy"], f"{path}.scoringStrategy", issues)
        )
    if name == "DeviceShare" and "gpuShareUnsupportedModels" in args:
        placement["devices"] = {"gpuShareUnsupportedModels": args["gpuShareUnsupportedModels"]}
    if name == "NodeNUMAResource" and "numaScoringStrategy" in args:
        scoring["numaNodes"] = _strategy(args["numaScoringStrategy"], f"{path}.numaScoringStrategy", issues)
    if name == "NodeNUMAResource" and "defaultCPUBindPolicy" in args:
        placement["cpu"] = {"defaultBindPolicy": args["defaultCPUBindPolicy"]}
    if name == "NodeResourcesFitPlus" and "resources" in args:
        resources = _mapping(args["resources"], f"{path}.resources", issues)
        out: JsonObject = {}
        for resource, raw in sorted(resources.items()):
            item = _mapping(raw, f"{path}.resources[{resource}]", issues)
            _unknown(item, {"type", "weight"}, f"{path}.resources[{resource}]", issues)
            out[resource] = {"strategy": item.get("type", "MostAllocated"), "weight": item.get("weight", 1)}
        _section(scoring, "nodeResourcesFitPlus")["resources"] = out
    if name == "ScarceResourceAvoidance" and "resources" in args:
        _section(scoring, "scarceResourceAvoidance")["resources"] = args["resources"]
    if name == "LoadAwareScheduling":
        _section(placement, "loadAware").update(
            {k: v for k, v in args.items() if k in _ARGS["LoadAwareScheduling"][0]}
        )
    if name == "ElasticQuota":
        quota.update({k: v for k, v in args.items() if k in _ARGS["ElasticQuota"][0]})
    if name == "Coscheduling" and "defaultTimeout" in args:
        from allot_quota.config import parse_duration

        try:
            gang["defaultTimeoutSeconds"] = parse_duration(args["defaultTimeout"], f"{path}.defaultTimeout")
        except ValueError as exc:
            issues.append(FieldIssue(path=f"{path}.defaultTimeout", message=str(exc)))
