"""The binder: SQL syntax trees to typed logical plans over the catalog."""

from piestream.frontend.binder.query import BoundQuery, QueryBinder

__all__ = ["BoundQuery", "QueryBinder"]
