"""A DeschedulerConfiguration's MigrationController args configure reservation-manager's migration controller."""

from __future__ import annotations

from pathlib import Path

from allot_runtime.settings import ServiceSettings
from reservation_manager.processor import ReservationManager

DESCHEDULER = {
    "apiVersion": "descheduler/v1alpha2",
    "kind": "DeschedulerConfiguration",
    "profiles": [
        {
            "name": "koord-descheduler",
            "pluginConfig": [
                {
                    "name": "MigrationController",
                    "args": {"maxMigratingPerNode": 4, "evictQPS": "5", "evictionPolicy": "Eviction"},
                },
                {
                    "name": "LowNodeLoad",
                    "args": {"lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60}},
                },
            ],
        }
    ],
}


def test_the_profiles_migration_controller_args_are_the_controllers_settings() -> None:
    manager = ReservationManager({"descheduler": DESCHEDULER})
    migration = manager.engine.config.migration
    assert migration.max_per_node == 4
    assert migration.evict_qps == 5


def test_reservation_managers_own_migration_settings_win() -> None:
    manager = ReservationManager({"descheduler": DESCHEDULER, "migration": {"maxMigratingPerNode": 1}})
    assert manager.engine.config.migration.max_per_node == 1


def test_a_deschedulerconfiguration_file_is_reservation_managers_config(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "descheduler.yaml"
    path.write_text(yaml.safe_dump(DESCHEDULER))
    settings = ServiceSettings(service="reservation-manager", database_url="x", config_file=str(path))
    assert settings.config() == {"descheduler": DESCHEDULER}
    other = ServiceSettings(service="quota-manager", database_url="x", config_file=str(path))
    assert other.config() == {}
