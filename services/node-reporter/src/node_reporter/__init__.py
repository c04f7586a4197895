"""node_reporter."""
