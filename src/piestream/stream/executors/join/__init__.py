"""The streaming HashJoin executor (reference §6.2); the plan node is `piestream.plan.hash_join`."""
