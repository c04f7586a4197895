"""reservation_manager."""
