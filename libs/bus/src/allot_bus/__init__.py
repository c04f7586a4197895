"""allot_bus."""
