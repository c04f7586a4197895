"""QuotaConfig: upstream argument names and defaults, strict parsing, round trip."""

import pytest

from allot_quota import QuotaConfig


def test_upstream_defaults():
    d = QuotaConfig.from_dict({}).to_dict()
    assert d["enableRuntimeQuota"] is True
    assert d["enableMinQuotaScale"] is True
    assert d["enableCheckParentQuota"] is False
    assert d["monitorAllQuotas"] is False
    assert d["disableDefaultQuotaPreemption"] is True
    assert d["delayEvictTime"] == "120s"
    assert d["revokePodInterval"] == "1s"
    assert d["quotaGroupNamespace"] == "koordinator-system"
    assert d["defaultQuotaGroupMax"] == {"cpu": str((2**63 - 1) // 5), "memory": str((2**63 - 1) // 5)}
    assert d["featureGates"] == {
        "DisableDefaultQuota": False,
        "ElasticQuotaEnableUpdateResourceKey": True,
        "ElasticQuotaGuaranteeUsage": False,
        "MultiQuotaTree": True,
    }
    assert d["version"] == 1


def test_round_trip():
    cfg = QuotaConfig.from_dict(
        {
            "delayEvictTime": "2m30s",
            "systemQuotaGroupMax": {"cpu": "8", "memory": "16Gi"},
            "version": 3,
            "featureGates": {"ElasticQuotaGuaranteeUsage": True},
        }
    )
    assert cfg.delay_evict_seconds == 150 and cfg.system_quota_max == {"cpu": 8000, "memory": 16 * 2**30}
    assert QuotaConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"enableRuntimeQuota": "yes"}, "enableRuntimeQuota: expected true or false", id="bool"),
        pytest.param({"delayEvictTime": "soon"}, "delayEvictTime: 'soon' is not a duration", id="duration"),
        pytest.param({"delayEvictTime": -1}, "must not be negative", id="negative-duration"),
        pytest.param(
            {"enableRuntimeQuotas": True},
            "enableRuntimeQuotas: unknown quota config key; supported: ",
            id="typo",
        ),
        pytest.param(
            {"featureGates": {"Nope": True}},
            "featureGates.Nope: unknown feature gate; supported: ",
            id="unknown-gate",
        ),
        pytest.param({"defaultQuotaGroupMax": {"cpu": "x"}}, "defaultQuotaGroupMax:", id="bad-quantity"),
    ],
)
def test_rejects(data, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        QuotaConfig.from_dict(data)
