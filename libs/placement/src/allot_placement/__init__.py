"""allot_placement."""
