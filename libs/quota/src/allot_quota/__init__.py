"""allot_quota."""
