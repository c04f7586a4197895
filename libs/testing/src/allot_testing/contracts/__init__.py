"""Contract suites: one per port, run against the in-memory fake and the real adapter."""
