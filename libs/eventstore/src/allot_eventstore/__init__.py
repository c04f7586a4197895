"""allot_eventstore."""
