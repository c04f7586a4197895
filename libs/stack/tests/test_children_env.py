"""What the dev-stack supervisor passes from its own environment to the services it starts."""

from __future__ import annotations

from allot_stack.supervisor import Supervisor


def test_the_snapshot_interval_reaches_every_service(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOT_SNAPSHOT_EVERY", "0")
    supervisor = Supervisor(state_dir=tmp_path)
    supervisor.plan_children()
    services = [child for child in supervisor.children if child.name != "relay"]
    assert services, "the plan starts the services"
    assert {child.env.get("ALLOT_SNAPSHOT_EVERY") for child in services} == {"0"}


def test_other_allot_settings_of_the_caller_stay_out(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOT_SOMETHING_UNKNOWN", "1")
    monkeypatch.delenv("ALLOT_SNAPSHOT_EVERY", raising=False)
    supervisor = Supervisor(state_dir=tmp_path)
    supervisor.plan_children()
    for child in supervisor.children:
        assert "ALLOT_SOMETHING_UNKNOWN" not in child.env
        assert "ALLOT_SNAPSHOT_EVERY" not in child.env
