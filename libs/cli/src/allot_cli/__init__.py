"""allot_cli."""
