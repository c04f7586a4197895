"""qos_enforcer."""
