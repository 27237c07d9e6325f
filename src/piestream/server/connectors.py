"""Connector-backed objects (CREATE SOURCE, CREATE SINK, tables WITH (connector = ...))."""

from __future__ import annotations

from typing import TYPE_CHECKING

from piestream.common.errors import FeatureNotSupported
from piestream.frontend.parser import ast

if TYPE_CHECKING:
    from piestream.frontend.planner import PlannedJob
    from piestream.server.results import QueryResult
    from piestream.server.session import Session


def plan_connector_table(s: Session, stmt: ast.CreateTable) -> PlannedJob:
    raise FeatureNotSupported(f"connector {stmt.with_options.get('connector')!r} is not supported")


def create_connector_object(s: Session, stmt: ast.Statement) -> QueryResult:
    raise FeatureNotSupported(f"{type(stmt).__name__} is not supported yet")
