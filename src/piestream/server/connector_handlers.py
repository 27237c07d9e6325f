"""Handlers of connector-backed objects: CREATE SOURCE, CREATE TABLE ... WITH (connector = ...),
CREATE SINK (meta's `DdlController` stores and starts what they plan).

- A SOURCE is a catalog entry (columns + connector options), not materialized: nothing runs
  until a materialized view (or sink) reads it; each such job gets its own `SourceNode` with its
  own splits and offsets (the stream planner builds it from the entry). SELECT from a source is
  refused, as RisingWave does for non-table sources.
- A TABLE WITH a connector is fed by a `SourceNode` instead of DML (DML on it is refused); its
  rows are stored, so it can be queried and read by MVs like any table.
- With ``error.handling = 'dead_letter'`` the source/table owns a companion table
  ``<name>_dead_letter(file, line, raw, error)`` that is dropped with it.
- A SINK is a streaming job ending in a `SinkNode`; after every committed epoch the driver
  publishes the sink output that epoch's committed state names (`piestream.server.sink_publisher`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from piestream.common.errors import DuplicateObject, FeatureNotSupported, PiestreamError
from piestream.connectors.kafka.sink import SINK_FORMATS, validate_kafka_sink_options
from piestream.connectors.lakehouse import LAKE_CONNECTORS, create_lake_table, lake_schema, new_staging_path
from piestream.connectors.options import InvalidOption, lower_keys, parse_bool
from piestream.connectors.sinks import STAGING, sink_output_path, validate_sink_options
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import ColumnCatalog, Relation, RelationKind, SinkInfo, SourceInfo
from piestream.frontend.parser import ast
from piestream.frontend.parser.names import object_name
from piestream.frontend.planner import PlannedJob, plan_sink, plan_table, table_conflict
from piestream.frontend.source_spec import connector_spec, proctime_columns, statement_source_spec
from piestream.frontend.stream_piece import Dist, ExchangeMarker
from piestream.frontend.watermark_derive import bind_watermark
from piestream.plan.node import StreamNode
from piestream.plan.sink import SINK_TYPES, SinkNode, sink_state_table
from piestream.plan.source import DEAD_LETTER_COLUMNS, SourceSpec, dead_letter_table
from piestream.server.cdc_handlers import check_cdc_source, check_cdc_table, is_cdc
from piestream.server.ddl_handlers import (
    check_new_name,
    check_not_temporary,
    check_upstreams_created,
    creation_schema,
    in_schema,
)
from piestream.server.results import QueryResult, command
from piestream.storage.table.desc import TableDesc
from piestream.stream.connector import plan_source_node, source_connector

if TYPE_CHECKING:
    from piestream.server.session import Session

log = logging.getLogger(__name__)

DEAD_LETTER_SUFFIX = "_dead_letter"


def _check_free(s: Session, schema: str, *names: str) -> None:
    for n in names:
        if s.db.catalog.get(n, schema) is not None:
            raise DuplicateObject(f'relation "{n}" already exists')


def _dead_letter_relation(desc: TableDesc, owner_id: int, schema: str) -> Relation:
    return Relation(
        schema_name=schema,
        id=desc.table_id,
        name=desc.name,
        kind=RelationKind.TABLE,
        columns=tuple(ColumnCatalog(n, t) for n, t in DEAD_LETTER_COLUMNS),
        definition=f"-- malformed records of relation {owner_id}",
        table=desc,
        depends_on=(owner_id,),
        properties={"connector": "dead_letter"},  # written by the source only: DML is refused
        owned_by=owner_id,
    )


# -- CREATE TABLE ... WITH (connector = ...) -----------------------------------------------------------


def plan_connector_table(s: Session, stmt: ast.CreateTable) -> tuple[PlannedJob, TableDesc | None]:
    """A table fed by a connector: Source -> [RowIdGen] -> Materialize (an exchange by the pk
    first if the table has one). Returns the plan and the dead-letter table to create, if any."""
    spec = statement_source_spec(
        stmt.name, stmt.columns, stmt.with_options, stmt.format_encode, stmt.includes
    )
    if is_cdc(spec.options):  # a CDC table's source emits its upstream's changes
        spec = replace(spec, format="debezium")
    for k in stmt.primary_key:
        if k not in [c for c, _ in spec.columns]:
            raise PiestreamError(f'column "{k}" named in key does not exist', sqlstate="42703")
    if not spec.append_only and not stmt.primary_key:
        raise PiestreamError(
            f"FORMAT {(spec.format or '').upper()} needs a primary key: declare PRIMARY KEY (...)",
            sqlstate="42P16",
        )
    if not spec.append_only and stmt.append_only:
        raise PiestreamError(
            f"an APPEND ONLY table cannot take FORMAT {(spec.format or '').upper()} (it has deletes)",
            sqlstate="42P16",
        )
    _, limits = source_connector(spec.connector)(spec)  # validate the options now
    if is_cdc(spec.options):  # the upstream, before anything is made
        check_cdc_table(spec, stmt.primary_key)
    ids = s.db.ddl.ids()
    dead = None
    if limits.error_handling == "dead_letter":
        dead = dead_letter_table(ids.next_table_id(), stmt.name + DEAD_LETTER_SUFFIX)
    conflict = table_conflict(stmt)
    parallelism = s.parallelism

    def source_node(schema, pk, table):  # type: ignore[no-untyped-def]
        src = plan_source_node(
            spec, schema=schema, stream_key=pk, state_table_id=ids.next_table_id(), dead_letter=dead
        )
        if is_cdc(spec.options):  # an upstream TRUNCATE deletes the table's rows
            src = replace(src, truncates=table)
        node: StreamNode = src
        # the table is stored by its pk (an ADAPTIVE one may get more actors later)
        if stmt.primary_key and (parallelism > 1 or s.adaptive):
            node = ExchangeMarker(
                schema=schema,
                stream_key=pk,
                append_only=node.append_only,
                input=node,
                dist=Dist("hash", tuple(pk)),
            )
        return node

    append_only = stmt.append_only or not stmt.primary_key  # a source only inserts
    watermark = bind_watermark(stmt.watermarks, spec.columns, append_only=append_only, what="table")
    planned = plan_table(
        name=stmt.name,
        columns=list(spec.columns),
        pk_names=stmt.primary_key,
        append_only=append_only,
        watermark=watermark,
        conflict=conflict,
        definition=stmt.text,
        job_id=s.db.ddl.next_job_id(),
        parallelism=parallelism,
        ids=ids,
        properties=dict(spec.options),
        source_node=source_node,
    )
    return planned, dead


def create_connector_table(s: Session, stmt: ast.CreateTable, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        schema = creation_schema(s, stmt.name)
        planned, dead = plan_connector_table(s, stmt)
        planned.relation = in_schema(s.with_policy(planned).relation, schema)
        res = command("CREATE TABLE")
        companions = []
        if dead is not None:
            _check_free(s, schema, dead.name)
            companions.append(_dead_letter_relation(dead, planned.relation.id, schema))
        s.db.ddl.create_job(planned, backfill=False, companions=companions)
        return res


# -- CREATE SOURCE -------------------------------------------------------------------------------------


def create_source(s: Session, stmt: ast.CreateSource, params: Sequence[Any] = ()) -> QueryResult:
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        if stmt.primary_key:
            raise FeatureNotSupported("PRIMARY KEY on a source is not supported (a source is append-only)")
        if is_cdc(stmt.with_options):
            return _create_cdc_source(s, stmt)
        spec = statement_source_spec(
            stmt.name, stmt.columns, stmt.with_options, stmt.format_encode, stmt.includes, proctime_ok=True
        )
        if not spec.append_only:
            raise FeatureNotSupported(
                f"FORMAT {(spec.format or '').upper()} is not supported on a SOURCE (its messages are "
                "changes): use CREATE TABLE ... (..., PRIMARY KEY (...)) FORMAT ..."
            )
        # validate the options now (AS PROCTIME() columns are the plan's, not the connector's)
        _, limits = source_connector(spec.connector)(connector_spec(spec, proctime_columns(stmt.columns)))
        watermark = bind_watermark(stmt.watermarks, spec.columns, append_only=True, what="source")
        schema = creation_schema(s, stmt.name)
        source_id = s.db.ddl.next_object_id()
        dead = None
        if limits.error_handling == "dead_letter":
            dead = dead_letter_table(s.db.ddl.next_object_id(), stmt.name + DEAD_LETTER_SUFFIX)
            _check_free(s, schema, dead.name)
        rel = Relation(
            schema_name=schema,
            id=source_id,
            name=stmt.name,
            kind=RelationKind.SOURCE,
            columns=tuple(ColumnCatalog(n, t) for n, t in spec.columns),
            definition=stmt.text,
            append_only=True,
            properties=dict(spec.options),
            source=SourceInfo(
                encode=spec.encode,
                encode_options=dict(spec.encode_options),
                generated=tuple(sorted(spec.generated)),
                dead_letter=dead,
                format=spec.format,
                include=spec.include,
            ),
            watermark=watermark,
        )
        companions = [] if dead is None else [_dead_letter_relation(dead, source_id, schema)]
        s.db.ddl.create_relations(rel, companions)
        return command("CREATE SOURCE")


def _create_cdc_source(s: Session, stmt: ast.CreateSource) -> QueryResult:
    """A shared CDC source: connection options only; its tables come with CREATE TABLE ... FROM."""
    if stmt.columns or stmt.format_encode is not None or stmt.watermarks:
        raise FeatureNotSupported(
            "a CDC source takes no columns, FORMAT or WATERMARK: declare them on "
            "CREATE TABLE ... FROM <source> TABLE '<schema.table>'"
        )
    opts = lower_keys(stmt.with_options)
    spec = SourceSpec(stmt.name, opts["connector"].strip().lower(), (), opts)
    check_cdc_source(spec)
    rel = Relation(
        schema_name=creation_schema(s, stmt.name),
        id=s.db.ddl.next_object_id(),
        name=stmt.name,
        kind=RelationKind.SOURCE,
        columns=(),
        definition=stmt.text,
        append_only=False,
        properties=dict(opts),
        source=SourceInfo(),
    )
    s.db.ddl.create_relations(rel, [])
    return command("CREATE SOURCE")


# -- CREATE SINK ---------------------------------------------------------------------------------------


def create_sink(s: Session, stmt: ast.CreateSink, params: Sequence[Any] = ()) -> QueryResult:
    """CREATE SINK. What it makes outside the catalog (a staging directory, the output directory,
    the lake table) is removed again if the statement fails, also when its first epoch (the
    backfill) fails: a failed CREATE SINK leaves nothing behind."""
    with s.db.ddl.lock:
        skipped = check_new_name(s, stmt)
        if skipped is not None:
            return skipped
        if stmt.into_table is not None:
            raise FeatureNotSupported("CREATE SINK ... INTO a table is not supported")
        opts = lower_keys(stmt.with_options)
        connector = opts.get("connector", "").strip().lower()
        if not connector:
            raise InvalidOption("a connector = '...' option is required")
        undo: list[Callable[[], None]] = []
        try:
            return _create_sink(s, stmt, opts, connector, undo)
        except BaseException:
            for fn in reversed(undo):
                try:
                    fn()
                except Exception:  # the statement's own error is what the client must see
                    log.exception("cleaning up after the failed CREATE SINK %s", stmt.name)
            raise


def _remove_new_dirs(path: str, made_already: bool = False) -> Callable[[], None]:
    """Undo for creating the directory `path` (and parents): removes those that do not exist yet
    (with `made_already`, `path` itself was just made by this statement and goes too)."""
    missing = [os.path.abspath(path)] if made_already else []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)

    def undo() -> None:
        if missing:
            shutil.rmtree(missing[-1], ignore_errors=True)

    return undo


def _create_sink(
    s: Session, stmt: ast.CreateSink, opts: dict[str, str], connector: str, undo: list[Callable[[], None]]
) -> QueryResult:
    if connector == "kafka":
        fe = stmt.format_encode
        opts.setdefault("format", "plain" if fe is None else fe.format.lower())
        opts.setdefault("encode", "json" if fe is None else fe.encode.lower())
        opts = validate_kafka_sink_options(opts, stmt.name)
        opts.setdefault("type", SINK_FORMATS[opts["format"]])
        if opts["format"] == "upsert" and not opts.get("primary_key"):
            raise InvalidOption("a kafka sink of FORMAT UPSERT needs a primary_key = '...' option")
    elif stmt.format_encode is not None:
        raise FeatureNotSupported(f'FORMAT ... ENCODE is not supported by the "{connector}" sink')
    if connector in LAKE_CONNECTORS and "staging.path" not in opts:
        staging_root = str(s.db.data_dir / "sink_staging")
        opts["staging.path"] = new_staging_path(staging_root, stmt.name)
        undo.append(_remove_new_dirs(opts["staging.path"], made_already=True))
    elif connector in LAKE_CONNECTORS:
        undo.append(_remove_new_dirs(os.path.join(opts["staging.path"], STAGING)))
    elif connector == "parquet" and opts.get("path"):
        undo.append(_remove_new_dirs(os.path.join(opts["path"], STAGING)))
    opts = validate_sink_options(connector, opts)
    sink_type = opts.get("type", "").strip().lower() or None
    if sink_type is not None and sink_type not in SINK_TYPES:
        raise InvalidOption(f"type must be one of {', '.join(SINK_TYPES)}, got '{sink_type}'")
    force_append = parse_bool("force_append_only", opts.get("force_append_only", "false"))
    key_names = [k.strip() for k in opts.get("primary_key", "").split(",") if k.strip()] or None
    if stmt.query is not None:
        query = stmt.query
        definition = stmt.text
    else:
        assert stmt.from_relation is not None  # FROM x = AS SELECT * FROM x
        query = exp.select("*").from_(object_name(stmt.from_relation).to_table())
        definition = stmt.text
    schema = creation_schema(s, stmt.name)
    binder = QueryBinder(s.committed_catalog())
    bound = binder.bind_query(query)
    check_upstreams_created(s, sorted(binder.dependencies))
    check_not_temporary(s, sorted(binder.dependencies), "sinks")
    ids = s.db.ddl.ids()
    made: list[SinkNode] = []
    width = len(bound.names)

    def make_sink(input: StreamNode, names: Sequence[str], key: tuple[int, ...]) -> StreamNode:
        kind = sink_type or ("append-only" if input.append_only or force_append else "upsert")
        if kind == "append-only" and not input.append_only and not force_append:
            raise PiestreamError(
                "The sink cannot be append-only. Please add \"force_append_only='true'\" in WITH "
                "options to force the sink to be append-only. Notice that this will cause the sink "
                "executor to drop DELETE messages and convert UPDATE messages to INSERT.",
                sqlstate="0A000",
            )
        cols = list(range(width))
        if kind != "append-only":
            cols += [k for k in key if k not in cols]  # hidden key columns are written too
        node = SinkNode(
            schema=input.schema,
            stream_key=input.stream_key,
            append_only=input.append_only,
            input=input,
            sink_name=stmt.name,
            connector=connector,
            options=opts,
            sink_type=kind,
            columns=tuple(cols),
            names=tuple(names[i] for i in cols),
            key=key,
            state_table=sink_state_table(ids.next_table_id(), f"{stmt.name}_sink_state"),
            force_append_only=force_append,
        )
        made.append(node)
        return node

    planned = plan_sink(
        bound,
        name=stmt.name,
        definition=definition,
        job_id=s.db.ddl.next_job_id(),
        parallelism=s.parallelism,
        ids=ids,
        depends_on=sorted(binder.dependencies),
        make_sink=make_sink,
        key_names=key_names,
        distribute_by_key=connector != "blackhole" and sink_type != "append-only",
        properties=opts,
        emit_on_window_close=stmt.emit_on_window_close,
    )
    node = made[0]
    if connector in LAKE_CONNECTORS:
        types = [node.input.schema[i].data_type for i in node.columns]
        drop_table = create_lake_table(
            connector, opts, lake_schema(node.names, types, connector, node.sink_type)
        )
        if drop_table is not None:
            undo.append(drop_table)
    planned.relation = replace(
        s.with_policy(planned).relation,
        schema_name=schema,
        sink=SinkInfo(connector, node.sink_type, sink_output_path(connector, opts), node.state_table),
    )
    s.db.ddl.create_job(planned, backfill=True, notice=s.notice)
    return command("CREATE SINK")
