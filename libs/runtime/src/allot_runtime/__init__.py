"""allot_runtime."""
