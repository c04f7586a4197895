"""allot_gang."""
