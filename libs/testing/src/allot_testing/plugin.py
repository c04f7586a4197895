"""Pytest plugin: fixtures for real PostgreSQL and NATS servers (filled in below)."""
