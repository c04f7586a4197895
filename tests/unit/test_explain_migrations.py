"""``allot explain pod`` for a migrated pod: which PodMigrationJob moved it, how it ended and why the descheduler
asked for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from allot_sim.scenario import load_config, run
from allot_stack.migration_views import migration_lines, pod_migrations
from allot_testing.builders import a_node
from allot_testing.scenario import Scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "descheduling" / "01-hot-and-idle.yaml"


def test_a_pod_the_descheduler_moved_says_why() -> None:
    sim, _, _ = run(str(EXAMPLE), config=load_config(str(EXAMPLE.with_name("01-hot-and-idle.config.yaml"))))
    lines = migration_lines("shop/web-0", asyncio.run(pod_migrations(sim.store, "shop/web-0")))
    assert lines == [
        "migrations:",
        "  PodMigrationJob koord-descheduler-r2-shop-web-0 (ReservationFirst): Succeeded: "
        'Bind Pod "shop/web-0" in Reservation "pmj-koord-descheduler-r2-shop-web-0"',
        "    asked for by the descheduler's LowNodeLoad (profile koord-descheduler, round 2)",
        "    why: node is overutilized, node cpu usage(84.38%)>threshold(60.00%)",
        "    evicted from node node-hot",
    ]
    # a pod that stayed has no migrations to show
    assert migration_lines("shop/web-3", asyncio.run(pod_migrations(sim.store, "shop/web-3"))) == []


def test_a_job_applied_by_hand_says_who_applied_it() -> None:
    s = Scenario()
    s.apply(a_node("n1"), a_node("n2"))
    s.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
    )
    s.apply(
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "PodMigrationJob",
            "metadata": {"name": "move-web"},
            "spec": {"podRef": {"namespace": "default", "name": "web"}, "mode": "EvictDirectly"},
        }
    )
    lines = migration_lines("default/web", asyncio.run(pod_migrations(s.sim.store, "default/web")))
    assert lines[0] == "migrations:" and lines[1].startswith("  PodMigrationJob move-web (EvictDirectly): ")
    assert lines[2] == "    applied by api"


def test_get_migrations_lists_the_descheduler_jobs() -> None:
    from allot_stack.logtools import projection
    from allot_stack.reservation_views import migration_rows

    sim, _, _ = run(str(EXAMPLE), config=load_config(str(EXAMPLE.with_name("01-hot-and-idle.config.yaml"))))
    engine = asyncio.run(
        projection(sim.store, "reservation-manager")
    ).engine  # as `allot get migrations` builds it
    rows = {r["job"]: r for r in migration_rows(engine)}
    assert sorted(rows) == ["koord-descheduler-r2-shop-web-0", "koord-descheduler-r2-shop-web-1"]
    assert {(r["phase"], r["from"], r["to"]) for r in rows.values()} == {
        ("Succeeded", "node-hot", "node-idle")
    }
