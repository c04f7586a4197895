"""The door: every bad input a user has sent us is refused with the file, document, field path and reason (or
accepted, with a warning, where upstream accepts it); YAML is read within limits; the valid documents of a file are
applied and each refused one is reported (``--atomic`` keeps all-or-nothing)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from allot_eventstore.clock import ManualClock
from allot_intake.documents import Document, load_documents, parse_documents
from allot_intake.errors import InputError
from allot_intake.manifests import Door
from allot_sim.scenario import run
from allot_testing.builders import a_node, a_pod

QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"
GANG = "gang.scheduling.koordinator.sh"


def verdict(body: dict[str, Any], door: Door | None = None) -> tuple[list[str], list[str]]:
    v = (door or Door()).check(Document(source="f.yaml", index=0, body=body))
    return [str(i) for i in v.issues], [str(w) for w in v.warnings]


def with_request(name: str, value: str, *, limit: str | None = None, **kwargs: Any) -> dict[str, Any]:
    pod = a_pod("p", **kwargs)
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"][name] = value
    if limit is not None:
        resources.setdefault("limits", {})[name] = limit
    return pod


def huge_gpu_node() -> dict[str, Any]:
    node = a_node("n")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1e30"
    return node


def with_spec(**fields: Any) -> dict[str, Any]:
    pod = a_pod("p")
    pod["spec"].update(fields)
    return pod


def required_terms(*terms: Any) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


REFUSED = [
    ("cpu-1e30", with_request("cpu", "1e30"), 'requests[cpu]: Invalid value: "1e30": must be at most'),
    (
        "node-1e30-gpus",
        huge_gpu_node(),
        'status.allocatable[nvidia.com/gpu]: Invalid value: "1e30": must be at',
    ),
    ("pod-name-not-dns", a_pod("Bad_Name!"), "metadata.name: a lowercase RFC 1123 subdomain"),
    ("pod-name-300-chars", a_pod("x" * 300), "metadata.name: a lowercase RFC 1123 subdomain"),
    ("annotation-300KiB", a_pod("p", annotations={"a": "x" * 300 * 1024}), "metadata.annotations: Too long"),
    (
        "resource-name",
        with_request("!!bad name", "1"),
        "requests[!!bad name]: must be a standard resource name",
    ),
    (
        "koord-gpu-zero",
        with_request("koordinator.sh/gpu", "0"),
        "the requested GPU must be greater than zero",
    ),
    (
        "batch-without-BE",
        with_request("kubernetes.io/batch-cpu", "1000"),
        'labels["koordinator.sh/qosClass"]: Required value: must specify koordinator QoS BE',
    ),
    (
        "cpu-request-above-limit",  # the API server refuses it; the door took it
        with_request("cpu", "2", limit="1"),
        "requests[cpu]: must be less than or equal to cpu limit of 1",
    ),
    (
        "quantity-of-5000-digits",  # raised out of the parser (a 500 at the webhook) before its number was bounded
        with_request("cpu", "0." + "1" * 5000),
        "its number has 5002 characters, at most 64 are accepted",
    ),
    (
        "user-set-reserve-pod",
        a_pod("p", annotations={"scheduling.koordinator.sh/reserve-pod": "true"}),
        'annotations["scheduling.koordinator.sh/reserve-pod"]: Forbidden',
    ),
    (
        "gpu-request-not-limit",
        with_request("nvidia.com/gpu", "1", limit="2"),
        "requests[nvidia.com/gpu]: must be equal to nvidia.com/gpu limit of 2",
    ),
    # a list or an object where a string is expected raised (unhashable) out of the door
    (
        "resource-spec-enum-a-list",
        a_pod("p", annotations={"scheduling.koordinator.sh/resource-spec": '{"requiredCPUBindPolicy": []}'}),
        '["scheduling.koordinator.sh/resource-spec"].requiredCPUBindPolicy: unsupported value []; one of',
    ),
    (
        "device-hint-enum-an-object",
        a_pod(
            "p",
            annotations={
                "scheduling.koordinator.sh/device-allocate-hint": '{"gpu": {"allocateStrategy": {"x": 1}}}'
            },
        ),
        '["scheduling.koordinator.sh/device-allocate-hint"].gpu.allocateStrategy: unsupported value',
    ),
    (
        "toleration-effect-a-list",
        with_spec(tolerations=[{"key": "k", "effect": ["NoSchedule"]}]),
        ("spec.tolerations[0].effect: must be a string"),
    ),
    (
        "toleration-value-a-number",
        with_spec(tolerations=[{"key": "k", "value": 5}]),
        ("spec.tolerations[0].value: must be a string"),
    ),
    (
        "match-expressions-a-number",
        with_spec(affinity=required_terms({"matchExpressions": 5})),
        ("nodeSelectorTerms[0].matchExpressions: must be a list"),
    ),
    (
        "match-fields-a-number",
        with_spec(affinity=required_terms({"matchFields": 5})),
        ("nodeSelectorTerms[0].matchFields: must be a list"),
    ),
    (
        "reservation-affinity-match-expressions-a-number",
        a_pod(
            "p",
            annotations={
                "scheduling.koordinator.sh/reservation-affinity": '{"requiredDuringSchedulingIgnoredDuring'
                'Execution": {"reservationSelectorTerms": [{"matchExpressions": 5}]}}'
            },
        ),
        "reservationSelectorTerms[0].matchExpressions: must be a list",
    ),
    *(
        (
            f"priority-class-preemption-policy-{value!r}",  # 0 and false were read as the default policy
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "hi"},
                "value": 9000,
                "preemptionPolicy": value,
            },
            "preemptionPolicy: supported values",
        )
        for value in (0, False, ["Never"])
    ),
    (
        "partition-table-malformed",
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {
                "name": "n",
                "annotations": {
                    "scheduling.koordinator.sh/gpu-partitions": '{"2": [{"allocationScore": 1}]}'
                },
            },
            "spec": {"devices": []},
        },
        '["scheduling.koordinator.sh/gpu-partitions"].2[0].minors: is required',
    ),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_bad_input_is_refused_with_the_field_and_the_reason(body: dict[str, Any], expected: str) -> None:
    issues, _ = verdict(body)
    assert any(expected in issue for issue in issues), issues


def test_a_pod_naming_a_quota_that_does_not_exist_is_refused_when_the_door_knows_the_quotas() -> None:
    pod = a_pod("p", labels={QUOTA_LABEL: "nope"})
    issues, _ = verdict(pod, Door(quotas={"team-a"}))
    assert any("elastic quota nope not found" in i for i in issues), issues
    assert verdict(a_pod("p", labels={QUOTA_LABEL: "team-a"}), Door(quotas={"team-a"})) == ([], [])


def a_quota_doc(name: str, is_parent: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"quota.scheduling.koordinator.sh/is-parent": is_parent},
        },
        "spec": {"max": {"cpu": "4"}},
    }


def test_a_pod_naming_a_parent_quota_is_refused_as_koordinators_pod_webhook_refuses_it() -> None:
    door = Door(quotas=set())
    assert verdict(a_quota_doc("dept", "true"), door) == ([], [])
    issues, _ = verdict(a_pod("p", labels={QUOTA_LABEL: "dept"}), door)
    assert issues == [
        'metadata.labels["quota.scheduling.koordinator.sh/name"]: pod can not be linked to a '
        "parentQuotaGroup,quota:dept, pod:p (got 'dept')"
    ]
    assert verdict(a_quota_doc("dept", "false"), door) == ([], [])  # a leaf again: pods may use it
    assert verdict(a_pod("p", labels={QUOTA_LABEL: "dept"}), door) == ([], [])


WARNED = [
    (
        "user-set-device-allocated",
        a_pod("p", annotations={"scheduling.koordinator.sh/device-allocated": '{"gpu": [{"minor": 0}]}'}),
        "the scheduler writes its own allocation here at bind time",
    ),
    (
        "gang-mode-unknown",
        a_pod(
            "p", annotations={f"{GANG}/name": "g", f"{GANG}/min-available": "2", f"{GANG}/mode": "Whatever"}
        ),
        "treated as Strict, as Koordinator does",
    ),
    (
        "gang-network-topology",
        a_pod(
            "p",
            annotations={
                f"{GANG}/name": "g",
                f"{GANG}/min-available": "2",
                f"{GANG}/network-topology-spec": "{}",
            },
        ),
        "network-topology-spec",
    ),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in WARNED], ids=[c[0] for c in WARNED])
def test_suspicious_input_upstream_accepts_is_accepted_with_a_warning(
    body: dict[str, Any], expected: str
) -> None:
    issues, warnings = verdict(body)
    assert issues == []
    assert any(expected in w for w in warnings), warnings


def test_kinds_a_user_applies_beside_pods_are_accepted() -> None:
    door = Door()
    for body in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}},
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "hi"},
            "value": 9000,
        },
        {
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "colocation-profile-example"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                "qosClass": "BE",
                "priorityClassName": "koord-batch",
                "koordinatorPriority": 1000,
                "schedulerName": "koord-scheduler",
            },
        },
    ):
        assert verdict(body, door)[0] == [], body["kind"]
    pod = a_pod("p")
    pod["spec"]["priorityClassName"] = "hi"
    assert verdict(pod, door)[0] == [], "a PriorityClass applied earlier resolves"
    pod["spec"]["priorityClassName"] = "nobody"
    assert any("priorityClassName" in i for i in verdict(pod, door)[0])


# --- reading YAML within limits --------------------------------------------------------------------------------------
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
# Each level merges the one before nine times: 9**8 entries copied, though the mapping built has 9 keys (measuring
# the built document found nothing to refuse, after seconds to minutes and hundreds of MB)
MERGE_BOMB = "a: &a {k0: v, k1: v, k2: v, k3: v, k4: v, k5: v, k6: v, k7: v, k8: v}\n" + "".join(
    f"{n}: &{n} {{<<: [{', '.join([f'*{p}'] * 9)}]}}\n" for p, n in zip("abcdefg", "bcdefgh", strict=True)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ALIAS_BOMB, "expands to more than 1000000 values"),
        ("a: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 64 levels"),
        ("kind: Pod\nmetadata: {name: [unclosed\n", "is not valid YAML"),
        ("- just\n- a list\n", "expected a mapping, got list"),
        # Python converts at most 4,300 digits: a longer integer raised out of the reader
        ("spec:\n  priority: " + "9" * 5000 + "\n", "an integer of 5000 characters; at most 64 are read"),
        # kubectl refuses a key given twice; the reader kept the last value without a word
        (
            "kind: Node\nmetadata:\n  name: a\n  name: b\n",
            "the key 'name' stands twice \\(first on line 3\\)",
        ),
        ("kind: Node\nmetadata: {name: a, name: b}\n", "the key 'name' stands twice \\(first on line 2\\)"),
    ],
    ids=[
        "alias-bomb",
        "deep-nesting",
        "not-yaml",
        "not-a-mapping",
        "integer-of-5000-digits",
        "key-twice",
        "flow-key-twice",
    ],
)
def test_yaml_beyond_the_limits_is_refused_quickly_and_named(text: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected) as caught:
        parse_documents(text, "f.yaml")
    assert str(caught.value).startswith("f.yaml")


def test_yaml_merge_keys_are_counted_while_the_document_is_built_so_a_merge_bomb_is_refused_at_once() -> None:
    started = time.perf_counter()
    with pytest.raises(InputError, match="f.yaml document 1: refused: expands to more than 1000000 values"):
        parse_documents(MERGE_BOMB, "f.yaml")
    assert time.perf_counter() - started < 2  # 0.1 s here; stopped before the copies are made


def test_a_colon_makes_text_not_a_base_60_number_as_kubernetes_reads_yaml() -> None:
    text = "busID: 0000:01:00.0\ntime: 12:30\nport: 8080\nratio: 0.5\n"
    assert parse_documents(text, "f.yaml")[0].body == {
        "busID": "0000:01:00.0",  # was 60.0, then the text "60.0"
        "time": "12:30",  # was 750
        "port": 8080,
        "ratio": 0.5,
    }


def test_merge_keys_within_the_limits_read_as_yaml_has_them() -> None:
    text = "base: &b {x: 1, y: 2}\nboth: &c {<<: *b, z: 3}\nthree: {<<: [*c, *b, *c], y: 4}\n"
    assert parse_documents(text, "f.yaml")[0].body["three"] == {"x": 1, "y": 4, "z": 3}


def clock(seconds: str) -> str:
    return f"apiVersion: allot.dev/v1\nkind: AdvanceClock\nspec: {{seconds: {seconds}}}\n"


@pytest.mark.parametrize("seconds", [".inf", ".nan", "1.0e+308", "3.0e+11", "315360001", "-1", "'60'"])
def test_an_advance_clock_beyond_ten_years_or_not_finite_is_refused(seconds: str) -> None:
    [doc] = parse_documents(clock(seconds), "f.yaml")
    assert verdict(doc.body)[0] == [
        f"spec.seconds: must be a number of seconds from 0 to 315360000 (10 years) (got {str(doc.body['spec']['seconds'])!r})"
    ]


def test_the_advance_clocks_of_a_run_move_the_clock_by_at_most_a_hundred_years(tmp_path: Path) -> None:
    door = Door()
    docs = parse_documents("---\n".join([clock("315360000")] * 11 + [clock("0")]), "f.yaml")
    issues = [[str(i) for i in door.check(doc).issues] for doc in docs]
    assert issues[:10] == [[]] * 10
    assert issues[10] == [
        "spec.seconds: would move the clock past 3153600000 seconds (100 years) in all; 3153600000 so far "
        "(got '3.1536e+08')"
    ]
    assert issues[11] == []  # the refused step did not count
    scenario = tmp_path / "late.yaml"
    scenario.write_text("---\n".join([clock("315360000")] * 101))
    sim, _, refused = run(str(scenario), config={})
    assert (refused, sim.clock.now_us - ManualClock().now_us) == (91, 3153600000 * 10**6)


def test_a_file_that_is_not_utf8_is_refused_with_the_byte_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"kind: Pod\nmetadata:\n  name: \xff\xfe\n")
    with pytest.raises(InputError, match=r"not valid UTF-8 \(byte \d+, line 3\)"):
        load_documents(str(path))


# --- partial apply ------------------------------------------------------------------------------------------------
def scenario_file(tmp_path: Path) -> Path:
    import yaml

    path = tmp_path / "mixed.yaml"
    path.write_text(
        yaml.safe_dump_all([a_node("n1"), a_pod("good"), with_request("cpu", "1e30"), a_pod("also-good")])
    )
    return path


def test_the_valid_documents_of_a_file_are_applied_and_the_refused_one_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, view, refused = run(str(scenario_file(tmp_path)), config={})
    assert refused == 1
    assert sorted(view.pods) == ["default/also-good", "default/good"]
    assert "document 3" in capsys.readouterr().err


def test_atomic_runs_nothing_when_one_document_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="1 document"):
        run(str(scenario_file(tmp_path)), config={}, atomic=True)


def test_a_pod_of_a_profile_tree_gets_the_trees_node_selector_as_required_affinity() -> None:
    door = Door(quotas=set())
    profile = {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": {"name": "pool-k", "namespace": "kube-system"},
        "spec": {"quotaName": "k-root", "nodeSelector": {"matchLabels": {"zone": "k"}}},
    }
    child = a_quota_doc("team", "false")
    child["metadata"]["labels"]["quota.scheduling.koordinator.sh/parent"] = "k-root"
    assert verdict(profile, door) == ([], [])
    assert verdict(child, door) == ([], [])
    pod = a_pod("p", labels={QUOTA_LABEL: "team"})
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
            }
        }
    }
    doc = Document(source="f.yaml", index=0, body=pod)
    assert door.check(doc).issues == []
    [term] = doc.body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "gpu", "operator": "Exists"},
        {"key": "zone", "operator": "In", "values": ["k"]},
    ]
    plain = Document(source="f.yaml", index=1, body=a_pod("q"))  # the default tree: unchanged
    door.check(plain)
    assert "affinity" not in plain.body["spec"]
    issues, _ = verdict(a_pod("r", labels={QUOTA_LABEL: "k-root"}), door)  # a tree root is a parent quota
    assert "pod can not be linked to a parentQuotaGroup,quota:k-root, pod:r" in issues[0]


def test_a_merge_key_may_be_overridden_and_the_same_key_may_stand_in_two_mappings() -> None:
    text = "kind: X\nbase: &b {k: 1, j: 2}\nover:\n  <<: *b\n  k: 3\nother: {k: 4}\n"
    body = parse_documents(text, "f.yaml")[0].body
    assert body["over"] == {"k": 3, "j": 2}
    assert body["other"] == {"k": 4}


def test_a_gang_waiting_a_nanosecond_through_an_hour_of_clock_times_out_once_per_attempt(
    tmp_path: Path,
) -> None:
    import yaml

    gang = {f"{GANG}/name": "g", f"{GANG}/min-available": "2", f"{GANG}/waiting-time": "1ns"}
    too_big = with_request("cpu", "64", limit="64", annotations=gang)
    too_big["metadata"]["name"] = "b"
    clock = {"apiVersion": "allot.dev/v1", "kind": "AdvanceClock", "spec": {"seconds": 3600}}
    scenario = tmp_path / "gang.yaml"
    scenario.write_text(yaml.safe_dump_all([a_node("n"), a_pod("a", annotations=gang), too_big, clock]))
    sim, view, refused = run(str(scenario), config={})  # fired a timer per nanosecond: never ended
    types = [record.type for record in sim.store.events]
    assert refused == 0 and view.pods["default/a"].phase == "Unschedulable"
    assert 10 <= types.count("gang.timed_out") == types.count("gang.group_ready") < 40
