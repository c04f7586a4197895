"""allot_testing."""
