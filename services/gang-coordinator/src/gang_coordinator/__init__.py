"""gang_coordinator."""
