"""device_allocator."""
