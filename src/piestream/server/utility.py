"""EXPLAIN, SET / SHOW / RESET, SHOW <objects>, SHOW CREATE and DESCRIBE."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedTable
from piestream.common.types import VARCHAR
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import BUILTIN_SCHEMAS, InvalidSchemaName, RelationKind
from piestream.frontend.logical import explain_tree
from piestream.frontend.optimizer import optimize
from piestream.frontend.parser import ast
from piestream.frontend.planner import Ids, explain_stream, plan_materialized_view
from piestream.server.results import QueryResult, command
from piestream.server.settings import DEFAULT_SETTINGS, parallelism_setting
from piestream.server.transaction import parse_bytes

if TYPE_CHECKING:
    from piestream.server.session import Session


class UndefinedObject(PiestreamError):
    sqlstate = "42704"


def _text_result(tag: str, header: str, lines: Sequence[str]) -> QueryResult:
    return QueryResult(tag, [(header, VARCHAR)], [(ln,) for ln in lines])


def explain(s: Session, stmt: ast.Explain, params: Sequence[Any]) -> QueryResult:
    inner = stmt.statement
    if isinstance(inner, ast.Query):
        from piestream.batch.plan import explain_tree as explain_batch
        from piestream.frontend.batch_planner import to_batch
        from piestream.server.query import created_indexes

        catalog = s.catalog()
        bound = QueryBinder(catalog, params).bind_query(inner.query)
        plan = optimize(bound.plan, streaming=False)
        text = explain_batch(to_batch(plan, lambda rel_id: created_indexes(s, catalog, rel_id)))
        if stmt.verbose:
            text = "Logical plan:\n" + explain_tree(plan) + "\n\nBatch plan:\n" + text
        return _text_result("EXPLAIN", "QUERY PLAN", text.splitlines())
    if isinstance(inner, ast.CreateMaterializedView):
        binder = QueryBinder(s.catalog(), params)
        bound = binder.bind_query(inner.query)
        counter = iter(range(1 << 40, 1 << 41))  # ids for display only: nothing is created
        ids = Ids(lambda: next(counter), lambda: next(counter) % 100000 + 900000, _upstream_parallelism(s))
        planned = plan_materialized_view(
            bound,
            name=inner.name,
            definition=inner.text,
            kind=RelationKind.MATERIALIZED_VIEW,
            job_id=0,
            parallelism=s.parallelism,
            ids=ids,
            depends_on=sorted(binder.dependencies),
            emit_on_window_close=inner.emit_on_window_close,
        )
        return _text_result("EXPLAIN", "QUERY PLAN", explain_stream(planned).splitlines())
    raise FeatureNotSupported(f"EXPLAIN {type(inner).__name__} is not supported")


def _upstream_parallelism(s: Session) -> Callable[[int], int]:
    def fn(fid: int) -> int:
        f = s.db.barriers.graph.fragments.get(fid)
        return f.parallelism if f is not None else s.parallelism

    return fn


def variables(s: Session, stmt: ast.Statement, params: Sequence[Any] = ()) -> QueryResult:
    if isinstance(stmt, ast.SetVariable):
        name = stmt.name.lower()
        if name in SYSTEM_SETTINGS:  # database-wide: SET is ALTER SYSTEM SET for these
            return alter_system(s, ast.AlterSystem(name, stmt.value), params)
        if stmt.value is None:
            s.settings[name] = DEFAULT_SETTINGS.get(name, "")
        else:
            if name == "transaction_buffer_limit":
                parse_bytes(stmt.value, name)  # refuse a bad value now, not at the next write
            if name == "streaming_parallelism":
                parallelism_setting(stmt.value)
            s.settings[name] = stmt.value
        return command("SET")
    if isinstance(stmt, ast.ResetAll):
        s.settings = dict(DEFAULT_SETTINGS)
        return command("RESET")
    assert isinstance(stmt, ast.ShowVariable)
    name = stmt.name.lower()
    if name == "all":
        return QueryResult("SHOW", [("Name", VARCHAR), ("Setting", VARCHAR)], sorted(s.settings.items()))
    if name in SYSTEM_SETTINGS:
        return QueryResult("SHOW", [(name, VARCHAR)], [("true" if s.db.strict_mode else "false",)])
    if name not in s.settings:
        raise UndefinedObject(f'unrecognized configuration parameter "{stmt.name}"')
    return QueryResult("SHOW", [(name, VARCHAR)], [(s.settings[name],)])


#: Database-wide settings (kept in the meta store across restarts) and their defaults.
SYSTEM_SETTINGS = {"streaming_strict_mode": "false"}
_TRUE = ("true", "on", "1", "yes")
_FALSE = ("false", "off", "0", "no")


def alter_system(s: Session, stmt: ast.AlterSystem, params: Sequence[Any] = ()) -> QueryResult:
    """ALTER SYSTEM SET streaming_strict_mode = true | false | DEFAULT: whether a data error in a
    streaming expression fails the epoch (true) or yields NULL plus an error record (false,
    RisingWave's default). Applies from the next epoch, to every job, and after restarts."""
    name = stmt.name.lower()
    if name not in SYSTEM_SETTINGS:
        raise UndefinedObject(f'unrecognized configuration parameter "{stmt.name}"')
    value = (stmt.value if stmt.value is not None else SYSTEM_SETTINGS[name]).lower()
    if value not in _TRUE + _FALSE:
        raise PiestreamError(f'parameter "{name}" requires a Boolean value', sqlstate="22023")
    s.db.set_strict_mode(value in _TRUE)
    return command("ALTER SYSTEM" if isinstance(stmt, ast.AlterSystem) else "SET")


def alter_source_rate_limit(
    s: Session, stmt: ast.AlterSourceRateLimit, params: Sequence[Any] = ()
) -> QueryResult:
    """ALTER SOURCE | TABLE name SET source_rate_limit = n | DEFAULT (RisingWave's): rows per
    second for the whole source, 0 pauses it, DEFAULT goes back to its WITH options. Applies
    from the next epoch to every job reading it, and after restarts."""
    rel = s.db.catalog.get(stmt.name)
    is_source = rel is not None and (
        rel.kind is RelationKind.SOURCE
        or (rel.kind is RelationKind.TABLE and rel.properties.get("connector"))
    )
    if rel is None or not is_source or (stmt.kind == "source") != (rel.kind is RelationKind.SOURCE):
        what = "source" if stmt.kind == "source" else "table with a connector"
        raise UndefinedTable(f'{what} "{stmt.name}" does not exist')
    rate = None
    if stmt.value is not None:
        try:
            rate = float(stmt.value)
        except ValueError:
            rate = -1.0
        if rate < 0:
            raise PiestreamError(
                f'source_rate_limit must be a number >= 0, got "{stmt.value}"', sqlstate="22023"
            )
    s.db.set_source_rate_limit(rel.name, rate)
    return command("ALTER_SOURCE" if stmt.kind == "source" else "ALTER_TABLE")


_SHOW_KINDS = {
    "tables": RelationKind.TABLE,
    "materialized views": RelationKind.MATERIALIZED_VIEW,
    "views": RelationKind.VIEW,
    "sources": RelationKind.SOURCE,
    "sinks": RelationKind.SINK,
    "subscriptions": RelationKind.SUBSCRIPTION,
    "indexes": RelationKind.INDEX,
}


def show(s: Session, stmt: ast.Statement, params: Sequence[Any] = ()) -> QueryResult:
    cat = s.catalog()
    if isinstance(stmt, ast.ShowObjects):
        if stmt.kind in _SHOW_KINDS:
            kind = _SHOW_KINDS[stmt.kind]
            # RisingWave's: SHOW TABLES [FROM schema] lists one schema, by default the current one
            schema = str(stmt.from_) if stmt.from_ else cat.current_schema
            if schema is None or schema not in cat.schemas:
                raise InvalidSchemaName(f'schema "{schema}" does not exist')
            names = sorted(r.name for r in cat.relations_in(schema) if r.kind is kind)
            if stmt.like:
                import fnmatch

                pat = stmt.like.replace("%", "*").replace("_", "?")
                names = [n for n in names if fnmatch.fnmatchcase(n, pat)]
            return QueryResult("SHOW", [("Name", VARCHAR)], [(n,) for n in names])
        if stmt.kind == "columns":
            return _describe(s, stmt.from_ or "")
        if stmt.kind in ("schemas", "databases"):
            if stmt.kind == "databases":
                return QueryResult("SHOW", [("Name", VARCHAR)], [(cat.database,)])
            shown = sorted(n for n in {*cat.schemas, *BUILTIN_SCHEMAS} if n != cat.temp_schema)
            return QueryResult("SHOW", [("Name", VARCHAR)], [(n,) for n in shown])
        raise FeatureNotSupported(f"SHOW {stmt.kind.upper()} is not supported")
    if isinstance(stmt, ast.ShowCreate):
        rel = cat.get_relation(stmt.name)
        if rel is None:
            raise UndefinedTable(f'relation "{stmt.name}" does not exist')
        return QueryResult("SHOW", [("Name", VARCHAR), ("Create Sql", VARCHAR)], [(rel.name, rel.definition)])
    assert isinstance(stmt, ast.Describe)
    return _describe(s, stmt.name)


def _describe(s: Session, name: str) -> QueryResult:
    rel = s.catalog().get_relation(name)
    if rel is None:
        raise UndefinedTable(f'relation "{name}" does not exist')
    rows: list[tuple[str, str, str]] = [
        (c.name, str(c.data_type), "true" if c.hidden else "false") for c in rel.columns
    ]
    if rel.table is not None and rel.table.pk:
        pk = ", ".join(rel.columns[i].name for i in rel.table.pk)
        rows.append(("primary key", pk, ""))
        dist = ", ".join(rel.columns[i].name for i in rel.table.dist_key)
        rows.append(("distribution key", dist, ""))
    cols = [("Name", VARCHAR), ("Type", VARCHAR), ("Is Hidden", VARCHAR)]
    return QueryResult("DESCRIBE", cols, rows)
