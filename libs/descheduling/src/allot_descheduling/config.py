"""The descheduler's configuration in Koordinator's shape: ``DeschedulerConfiguration`` (``descheduler/v1alpha2``)
with profiles, their plugins and ``pluginConfig`` — ``LowNodeLoad`` args (``LowNodeLoadArgs``) and the
``MigrationController`` args the descheduler itself reads.

Read (every other key is refused with its field path)::

    apiVersion: descheduler/v1alpha2          # optional; another version is refused
    kind: DeschedulerConfiguration            # optional; another kind is refused
    deschedulingInterval: 60s                 # Allot's default
    dryRun: false                             # every profile records what it would do, asks for nothing
    profiles:
    - name: koord-descheduler
      plugins:
        balance: {enabled: [{name: LowNodeLoad}], disabled: [...]}   # LowNodeLoad runs when enabled (or configured)
        evict: {enabled: [{name: MigrationController}]}               # accepted; migrations are the only way out
        deschedule: {disabled: [{name: "*"}]}                        # and filter: Allot runs no plugin there
                                       # (an unknown point or plugin name is refused: allot_descheduling.plugins)
      pluginConfig:
      - name: LowNodeLoad
        args:
          paused: false
          dryRun: false
          nodeSelector: {matchLabels: {...}}
          useDeviationThresholds: false
          lowThresholds: {cpu: 30, memory: 40}     # percent of allocatable (numbers 0–100)
          highThresholds: {cpu: 70, memory: 80}
          prodLowThresholds: {...}                 # the same, over the prod pods' usage (optional)
          prodHighThresholds: {...}
          resourceWeights: {cpu: 1, memory: 1}
          anomalyCondition: {timeout: 1m, consecutiveAbnormalities: 5, consecutiveNormalities: 3}
          evictableNamespaces: {include: [...], exclude: [...]}
          nodeMetricExpirationSeconds: 180
          numberOfNodes: 0
          podSelectors: [{name: web, selector: {matchLabels: {...}}}]
          gangMigration: Skip                      # Skip | Whole (Allot's): whether a gang may move whole
          nodePools: [{name, nodeSelector, useDeviationThresholds, lowThresholds, highThresholds, prodLowThresholds,
                       prodHighThresholds, resourceWeights, anomalyCondition}]
      - name: MigrationController
        args: {defaultJobMode: ReservationFirst, defaultJobTTL: 5m, evictLocalStoragePods: false,
               evictSystemCriticalPods: false}    # mode and ttl: reservation-manager's migration defaults when unset

Rules: low and high thresholds name the same resources, each low at most its high (prod ones likewise, both or
neither); a pool's fields it does not set come from the top-level args; without ``nodePools`` the top-level args are
one pool named after the profile. ``consecutiveAbnormalities`` is at least 1. Pure: no IO, no clock.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Final

import msgspec

from allot_contracts.errors import InvalidConfig
from allot_contracts.issues import FieldIssue, checked_list, checked_object
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.selectors import LabelSelector, parse_label_selector
from allot_descheduling.defrag_args import DefragArgs, parse_defrag_args
from allot_descheduling.evictor import EvictorArgs
from allot_descheduling.fields import boolean, duration, integer, namespaces, selector, unknown
from allot_descheduling.gangs import parse_gang_migration
from allot_descheduling.migration_args import MigrationArgs, parse_migration_args
from allot_descheduling.plugins import GPU_DEFRAG, LOW_NODE_LOAD, MIGRATION, balance_plugins, type_meta

__all__ = [
    "AnomalyCondition",
    "DeschedulerConfig",
    "DeschedulerConfigError",
    "LowNodeLoadArgs",
    "NodePool",
    "Profile",
    "parse_config",
]

PLUGIN: Final = LOW_NODE_LOAD
DEFAULT_INTERVAL_US: Final = 60_000_000
# how upstream's process runs (leader election, client, endpoints, profiling): accepted, nothing to decide
_PROCESS_FIELDS: Final = frozenset(
    {
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
    }
)
_CAPS: Final = ("maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal")
_TOP_FIELDS: Final = _PROCESS_FIELDS | {
    "apiVersion",
    "kind",
    "deschedulingInterval",
    "dryRun",
    "profiles",
    "nodeSelector",
    *_CAPS,
}
_PROFILE_FIELDS: Final = frozenset({"name", "plugins", "pluginConfig", "nodeSelector"})
_POOL_FIELDS: Final = frozenset(
    {
        "name",
        "nodeSelector",
        "useDeviationThresholds",
        "lowThresholds",
        "highThresholds",
        "prodLowThresholds",
        "prodHighThresholds",
        "resourceWeights",
        "anomalyCondition",
    }
)
_ARGS_FIELDS: Final = (_POOL_FIELDS - {"name"}) | {
    "apiVersion",
    "kind",
    "paused",
    "dryRun",
    "nodeFit",
    "evictableNamespaces",
    "nodeMetricExpirationSeconds",
    "numberOfNodes",
    "podSelectors",
    "nodePools",
    "detectorCacheTimeout",  # upstream's detector cache; Allot's counters live in the recorded rounds
    "gangMigration",  # Allot's: Skip | Whole, for a gang whose members state no policy
}
Thresholds = dict[str, Fraction]


class DeschedulerConfigError(InvalidConfig):
    def __init__(self, issues: list[FieldIssue]) -> None:
        super().__init__(issues, subject="invalid descheduler configuration")


class AnomalyCondition(msgspec.Struct, frozen=True, kw_only=True):
    timeout_us: int = 60_000_000
    consecutive_abnormalities: int = 5
    consecutive_normalities: int = 3


class NodePool(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    selector: LabelSelector | None = None
    use_deviation: bool = False
    low: Thresholds = {}
    high: Thresholds = {}
    prod_low: Thresholds = {}
    prod_high: Thresholds = {}
    weights: dict[str, int] = {}
    anomaly: AnomalyCondition = AnomalyCondition()


class LowNodeLoadArgs(msgspec.Struct, frozen=True, kw_only=True):
    paused: bool = False
    dry_run: bool = False
    node_fit: bool = True
    node_selector: LabelSelector | None = None
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    expiration_us: int = 180_000_000
    number_of_nodes: int = 0
    pod_selectors: tuple[LabelSelector, ...] = ()
    pools: tuple[NodePool, ...] = ()
    gang_whole: bool = False  # gangMigration: Whole (a gang member's annotation says otherwise for its gang)


class Profile(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    low_node_load: LowNodeLoadArgs | None = None
    job_mode: str = ""  # "": reservation-manager's migration.defaultJobMode
    job_ttl_us: int = 0  # 0: reservation-manager's migration.defaultJobTTL
    evict_local_storage: bool = False
    evict_system_critical: bool = False
    dry_run: bool = False  # the MigrationController args' dryRun: rounds ask for no job
    # the migration controller's settings its MigrationController args give
    controller: dict[str, object] = {}
    args_path: str = ""  # where its MigrationController args are (for errors naming them)
    # the evictor filter its rounds apply: the migration controller's, set by the host (the jobs it asks for pass the
    # same filter); None: this profile's evictLocalStoragePods / evictSystemCriticalPods alone
    evictor: EvictorArgs | None = None
    defrag: DefragArgs | None = None  # GPUDefrag's args when it runs

    def evictor_args(self) -> EvictorArgs:
        if self.evictor is not None:
            return self.evictor
        return EvictorArgs(
            evict_local_storage=self.evict_local_storage, evict_system_critical=self.evict_system_critical
        )


class DeschedulerConfig(msgspec.Struct, frozen=True, kw_only=True):
    interval_us: int = DEFAULT_INTERVAL_US
    dry_run: bool = False
    profiles: tuple[Profile, ...] = ()
    # maxNoOfPodsToEvictPerNode / PerNamespace / Total: pods a round may move (0: no limit)
    caps: tuple[int, int, int] = (0, 0, 0)

    @property
    def migration(self) -> dict[str, object] | None:
        """The migration controller's settings the profiles' MigrationController args give (None: none do)."""
        return next((p.controller for p in self.profiles if p.controller), None)

    @property
    def enabled(self) -> bool:
        return any(p.low_node_load is not None or p.defrag is not None for p in self.profiles)


def _thresholds(raw: Any, path: str, issues: list[FieldIssue]) -> Thresholds | None:
    """``{resource: percent}`` (numbers 0–100); ``None`` when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        issues.append(FieldIssue(path=path, message="must be a map of resource name to percentage"))
        return {}
    out: Thresholds = {}
    for name, value in sorted(raw.items()):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
            issues.append(
                FieldIssue(
                    path=f"{path}.{name}", message="must be a percentage from 0 to 100", value=str(value)
                )
            )
            continue
        out[str(name)] = Fraction(str(value))
    return out


def _pair(
    low: Thresholds | None,
    high: Thresholds | None,
    path: str,
    names: tuple[str, str],
    issues: list[FieldIssue],
) -> tuple[Thresholds, Thresholds]:
    low_name, high_name = names
    if low is None and high is None:
        return {}, {}
    if low is None or high is None:
        missing = low_name if low is None else high_name
        issues.append(
            FieldIssue(
                path=f"{path}{missing}", code="Required", message=f"{low_name} and {high_name} go together"
            )
        )
        return {}, {}
    if set(low) != set(high):
        issues.append(
            FieldIssue(
                path=f"{path}{high_name}",
                message=f"must name the same resources as {low_name} ({', '.join(sorted(low)) or 'none'})",
            )
        )
        return {}, {}
    for name in sorted(low):
        if low[name] > high[name]:
            issues.append(
                FieldIssue(
                    path=f"{path}{low_name}.{name}",
                    message=f"must not exceed {high_name}.{name} ({high[name]})",
                    value=str(low[name]),
                )
            )
    return low, high


def _anomaly(raw: Any, path: str, issues: list[FieldIssue], default: AnomalyCondition) -> AnomalyCondition:
    if raw is None:
        return default
    data = checked_object(raw, path, issues)
    unknown(
        data, frozenset({"timeout", "consecutiveAbnormalities", "consecutiveNormalities"}), f"{path}.", issues
    )
    return AnomalyCondition(
        timeout_us=duration(data.get("timeout"), f"{path}.timeout", issues, default.timeout_us),
        consecutive_abnormalities=integer(
            data.get("consecutiveAbnormalities"),
            f"{path}.consecutiveAbnormalities",
            issues,
            default.consecutive_abnormalities,
            1,
        ),
        consecutive_normalities=integer(
            data.get("consecutiveNormalities"),
            f"{path}.consecutiveNormalities",
            issues,
            default.consecutive_normalities,
            0,
        ),
    )


def _weights(raw: Any, path: str, issues: list[FieldIssue], default: dict[str, int]) -> dict[str, int]:
    if raw is None:
        return default
    out: dict[str, int] = {}
    for name, value in sorted(checked_object(raw, path, issues).items()):
        out[str(name)] = integer(value, f"{path}.{name}", issues, 1, 0)
    return out


def _pool(raw: JsonObject, path: str, issues: list[FieldIssue], base: NodePool) -> NodePool:
    low = _thresholds(raw.get("lowThresholds"), f"{path}lowThresholds", issues)
    high = _thresholds(raw.get("highThresholds"), f"{path}highThresholds", issues)
    prod_low = _thresholds(raw.get("prodLowThresholds"), f"{path}prodLowThresholds", issues)
    prod_high = _thresholds(raw.get("prodHighThresholds"), f"{path}prodHighThresholds", issues)
    if low is None and high is None:
        low, high = base.low, base.high
    else:
        low, high = _pair(low, high, path, ("lowThresholds", "highThresholds"), issues)
    if prod_low is None and prod_high is None:
        prod_low, prod_high = base.prod_low, base.prod_high
    else:
        prod_low, prod_high = _pair(
            prod_low, prod_high, path, ("prodLowThresholds", "prodHighThresholds"), issues
        )
    return NodePool(
        name=str(raw.get("name") or base.name),
        selector=selector(raw.get("nodeSelector"), f"{path}nodeSelector", issues),
        use_deviation=boolean(
            raw.get("useDeviationThresholds"), f"{path}useDeviationThresholds", issues, base.use_deviation
        ),
        low=low,
        high=high,
        prod_low=prod_low,
        prod_high=prod_high,
        weights=_weights(raw.get("resourceWeights"), f"{path}resourceWeights", issues, base.weights),
        anomaly=_anomaly(raw.get("anomalyCondition"), f"{path}anomalyCondition", issues, base.anomaly),
    )


def _low_node_load(raw: Any, path: str, issues: list[FieldIssue], profile: str) -> LowNodeLoadArgs:
    data = checked_object(raw, path, issues)
    unknown(data, _ARGS_FIELDS, f"{path}.", issues)
    base = _pool(data, f"{path}.", issues, NodePool(name=profile, weights={"cpu": 1, "memory": 1}))
    pools: list[NodePool] = []
    raw_pools = checked_list(
        data.get("nodePools"), f"{path}.nodePools", issues, message="must be a list of node pools"
    )
    for i, item in enumerate(raw_pools):
        ppath = f"{path}.nodePools[{i}]"
        pdata = checked_object(item, ppath, issues)
        unknown(pdata, _POOL_FIELDS, f"{ppath}.", issues)
        if pdata.get("name") is not None and not isinstance(pdata["name"], str):
            issues.append(FieldIssue(path=f"{ppath}.name", message="must be a string"))
        # upstream's name is optional: an unnamed pool is named after the profile (and its place when there are more)
        unnamed = profile if len(raw_pools) == 1 else f"{profile}-{i}"
        pools.append(_pool(pdata, f"{ppath}.", issues, msgspec.structs.replace(base, name=unnamed)))
    if not pools:
        pools = [base]
    for i, pool in enumerate(pools):
        if not pool.high:
            where = f"{path}.nodePools[{i}]." if raw_pools else f"{path}."
            issues.append(
                FieldIssue(
                    path=f"{where}highThresholds",
                    code="Required",
                    message="lowThresholds and highThresholds are required (here or in the top-level args)",
                )
            )
    include, exclude = namespaces(data.get("evictableNamespaces"), f"{path}.evictableNamespaces", issues)
    selectors: list[LabelSelector] = []
    raw_selectors = checked_list(
        data.get("podSelectors"), f"{path}.podSelectors", issues, message="must be a list of {name, selector}"
    )
    for i, item in enumerate(raw_selectors):
        sdata = checked_object(item, f"{path}.podSelectors[{i}]", issues)
        unknown(sdata, frozenset({"name", "selector"}), f"{path}.podSelectors[{i}].", issues)
        if sdata.get("selector") is not None:
            selectors.append(
                parse_label_selector(sdata["selector"], f"{path}.podSelectors[{i}].selector", issues)
            )
    return LowNodeLoadArgs(
        paused=boolean(data.get("paused"), f"{path}.paused", issues, False),
        dry_run=boolean(data.get("dryRun"), f"{path}.dryRun", issues, False),
        node_fit=boolean(data.get("nodeFit"), f"{path}.nodeFit", issues, True),
        node_selector=selector(data.get("nodeSelector"), f"{path}.nodeSelector", issues),
        include_namespaces=include,
        exclude_namespaces=exclude,
        expiration_us=integer(
            data.get("nodeMetricExpirationSeconds"), f"{path}.nodeMetricExpirationSeconds", issues, 180, 1
        )
        * 1_000_000,
        number_of_nodes=integer(data.get("numberOfNodes"), f"{path}.numberOfNodes", issues, 0, 0),
        pod_selectors=tuple(selectors),
        pools=tuple(pools),
        gang_whole=parse_gang_migration(data, path, issues),
    )


def _profile(raw: Any, path: str, issues: list[FieldIssue]) -> Profile:
    data = checked_object(raw, path, issues)
    unknown(data, _PROFILE_FIELDS, f"{path}.", issues)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        issues.append(FieldIssue(path=f"{path}.name", code="Required", message="a profile needs a name"))
        name = "default"
    balance = balance_plugins(data.get("plugins"), f"{path}.plugins", issues)
    enabled = balance[PLUGIN]
    defrag: DefragArgs | None = None
    defrag_configured = False
    args: Any = None
    configured = False
    migration = MigrationArgs()
    mpath = ""
    entries = data.get("pluginConfig") or []
    if not isinstance(entries, list):
        issues.append(FieldIssue(path=f"{path}.pluginConfig", message="must be a list of {name, args}"))
        entries = []
    for i, entry in enumerate(entries):
        epath = f"{path}.pluginConfig[{i}]"
        edata = checked_object(entry, epath, issues)
        unknown(edata, frozenset({"name", "args"}), f"{epath}.", issues)
        if edata.get("name") in (PLUGIN, MIGRATION, GPU_DEFRAG):
            type_meta(
                checked_object(edata.get("args"), f"{epath}.args", []),
                f"{epath}.args.",
                f"{edata['name']}Args",
                issues,
            )
        if edata.get("name") == PLUGIN:
            args, configured = edata.get("args") or {}, True
        elif edata.get("name") == GPU_DEFRAG:
            defrag, defrag_configured = parse_defrag_args(edata.get("args"), f"{epath}.args", issues), True
        elif edata.get("name") == MIGRATION:
            mpath = f"{epath}.args"
            migration = parse_migration_args(checked_object(edata.get("args"), mpath, issues), mpath, issues)
        else:
            issues.append(
                FieldIssue(
                    path=f"{epath}.name",
                    code="NotSupported",
                    message=f"supported plugins: {PLUGIN}, {GPU_DEFRAG}, {MIGRATION}",
                    value=str(edata.get("name")),
                )
            )
    low_node_load = None
    if enabled is True or (enabled is None and configured):
        if not configured:
            issues.append(
                FieldIssue(
                    path=f"{path}.pluginConfig",
                    code="Required",
                    message=f"{PLUGIN} is enabled: its args (thresholds) are required",
                )
            )
        else:
            index = next(i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("name") == PLUGIN)
            low_node_load = _low_node_load(args, f"{path}.pluginConfig[{index}].args", issues, name)
    if low_node_load is not None and data.get("nodeSelector") is not None:
        extra = parse_label_selector(data["nodeSelector"], f"{path}.nodeSelector", issues)
        low_node_load = msgspec.structs.replace(
            low_node_load, node_selector=(low_node_load.node_selector or ()) + extra
        )
    if balance[GPU_DEFRAG] is False:
        defrag = None
    elif balance[GPU_DEFRAG] and not defrag_configured:
        defrag = DefragArgs()  # enabled without args: the defaults (a dry run)
    return Profile(
        name=name,
        low_node_load=low_node_load,
        defrag=defrag,
        job_mode=migration.job_mode,
        job_ttl_us=migration.job_ttl_us,
        evict_local_storage=migration.evict_local_storage,
        evict_system_critical=migration.evict_system_critical,
        dry_run=migration.dry_run,
        controller=migration.controller,
        args_path=mpath,
    )


def parse_config(raw: Any, path: str = "descheduler") -> DeschedulerConfig:
    """The configuration, or :class:`DeschedulerConfigError` listing every problem with its field path."""
    issues: list[FieldIssue] = []
    data = checked_object(raw, path, issues)
    unknown(data, _TOP_FIELDS, f"{path}.", issues)
    type_meta(data, f"{path}.", "DeschedulerConfiguration", issues)
    interval = duration(
        data.get("deschedulingInterval"), f"{path}.deschedulingInterval", issues, DEFAULT_INTERVAL_US
    )
    if interval <= 0 and "deschedulingInterval" in data:
        issues.append(
            FieldIssue(path=f"{path}.deschedulingInterval", message="must be positive", value=str(interval))
        )
    raw_profiles = data.get("profiles") or []
    if not isinstance(raw_profiles, list):
        issues.append(FieldIssue(path=f"{path}.profiles", message="must be a list of profiles"))
        raw_profiles = []
    profiles = [_profile(p, f"{path}.profiles[{i}]", issues) for i, p in enumerate(raw_profiles)]
    names = [p.name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            issues.append(FieldIssue(path=f"{path}.profiles[{i}].name", message="duplicate profile name"))
    controllers = [(i, p.controller) for i, p in enumerate(profiles) if p.controller]
    for i, controller in controllers[1:]:
        if controller != controllers[0][1]:
            issues.append(
                FieldIssue(
                    path=f"{profiles[i].args_path}",
                    message="one migration controller serves every profile: its MigrationController args must be "
                    f"the same as {profiles[controllers[0][0]].args_path}'s",
                )
            )
    if data.get("nodeSelector") is not None:  # every profile considers only these nodes
        only = parse_label_selector(data["nodeSelector"], f"{path}.nodeSelector", issues)
        profiles = [
            msgspec.structs.replace(
                p,
                low_node_load=msgspec.structs.replace(
                    p.low_node_load, node_selector=(p.low_node_load.node_selector or ()) + only
                ),
            )
            if p.low_node_load is not None
            else p
            for p in profiles
        ]
    caps = tuple(integer(data.get(k), f"{path}.{k}", issues, 0, 0) for k in _CAPS)
    dry_run = boolean(data.get("dryRun"), f"{path}.dryRun", issues, False)
    if issues:
        raise DeschedulerConfigError(issues)
    return DeschedulerConfig(
        interval_us=interval, dry_run=dry_run, profiles=tuple(profiles), caps=(caps[0], caps[1], caps[2])
    )
