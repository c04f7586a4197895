"""allot_contracts."""
