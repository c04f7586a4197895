"""The relay: publishes the PostgreSQL event log to NATS JetStream, in log order, and seals it (docs/security.md)."""
