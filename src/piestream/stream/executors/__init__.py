"""The streaming executors, one module per operator (reference §6)."""
