"""The streaming HashJoin executor (reference §6.2); the plan node is in `executors.hash_join`."""
