"""Operator caches: columnar key -> rows maps in front of state tables, bounded per worker."""
