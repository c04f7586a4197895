"""quota_manager."""
