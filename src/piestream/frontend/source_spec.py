"""The connector spec (`SourceSpec`) of a source: from its CREATE statement, or from its catalog
entry when a streaming job reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import BYTEA, TIMESTAMPTZ, VARCHAR, DataType
from piestream.frontend.catalog import Relation, RelationKind, SourceInfo
from piestream.frontend.parser import ast, parse_one
from piestream.plan.source import SourceSpec
from piestream.stream.connector import check_format, supports_include

#: the column type of each INCLUDE kind (RisingWave's)
INCLUDE_TYPES: dict[str, DataType] = {
    "key": BYTEA,
    "partition": VARCHAR,
    "offset": VARCHAR,
    "timestamp": TIMESTAMPTZ,
    "header": BYTEA,
}


def statement_source_spec(
    name: str,
    columns: Sequence[ast.ColumnDef],
    options: dict[str, str],
    format_encode: ast.FormatEncode | None,
    includes: Sequence[ast.Include] = (),
    *,
    proctime_ok: bool = False,
) -> SourceSpec:
    """The connector spec of CREATE SOURCE / CREATE TABLE ... WITH (connector = ...): the
    declared columns, then the INCLUDE columns, the WITH options (keys lower-case) and
    FORMAT ... ENCODE (checked against the connector's pairs: 0A000 otherwise).

    ``c TIMESTAMPTZ AS PROCTIME()`` columns (`proctime_ok`: a SOURCE's) stay among the columns
    but not the connector's generated ones: the streaming plan computes them above the source
    (`connector_spec` leaves them out of what the connector reads)."""
    opts = {k.lower(): v for k, v in options.items()}
    connector = opts.get("connector", "").strip().lower()
    if not connector:
        raise PiestreamError("a connector = '...' option is required", sqlstate="22023")
    cols: list[tuple[str, DataType]] = []
    generated = []
    for c in columns:
        if c.default is not None:
            raise FeatureNotSupported(f'DEFAULT for column "{c.name}" of a connector source is not supported')
        if c.type is None:
            raise FeatureNotSupported(f'generated column "{c.name}" needs a type in a connector source')
        if is_proctime(c.generated):
            if not proctime_ok:
                raise FeatureNotSupported(
                    f'column "{c.name}" AS PROCTIME() is supported on a SOURCE only, not on a table'
                )
            if c.type != TIMESTAMPTZ:
                raise PiestreamError(
                    f'column "{c.name}" AS PROCTIME() must be TIMESTAMPTZ (PROCTIME() is '
                    f"timestamp with time zone), not {c.type}",
                    sqlstate="42804",
                )
        elif c.generated is not None:
            generated.append(c.name)
        if c.type.has_typmod:  # connectors write their values as they decode them
            raise FeatureNotSupported(
                f'column "{c.name}" of a connector source cannot be {c.type}: declare numeric '
                "and round in a view or materialized view"
            )
        cols.append((c.name, c.type))
    include: list[tuple[str, str, str]] = []
    for inc in includes:
        col = inc.column or (
            f"_rw_{connector}_{inc.kind}" + (f"_{inc.header}" if inc.header is not None else "")
        )
        include.append((inc.kind, col, inc.header or ""))
        cols.append((col, INCLUDE_TYPES[inc.kind]))
    names = [n for n, _ in cols]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PiestreamError(f'column "{dup}" specified more than once', sqlstate="42701")
    if not cols:
        raise PiestreamError("a source needs at least one column", sqlstate="42601")
    fe = format_encode
    check_format(connector, None if fe is None else fe.format, None if fe is None else fe.encode)
    if include and not supports_include(connector):
        raise FeatureNotSupported(f'INCLUDE is not supported by connector "{connector}"')
    return SourceSpec(
        name=name,
        connector=connector,
        columns=tuple(cols),
        options=opts,
        encode=None if fe is None else fe.encode.lower(),
        encode_options={} if fe is None else {k.lower(): v for k, v in fe.options.items()},
        generated=frozenset(generated),
        format=None if fe is None else fe.format.lower(),
        include=tuple(include),
    )


def is_proctime(e: exp.Expression | None) -> bool:
    """Whether a generated column's expression is RisingWave's ``PROCTIME()``."""
    return isinstance(e, exp.Anonymous) and str(e.this).lower() == "proctime" and not e.expressions


def proctime_columns(columns: Sequence[ast.ColumnDef]) -> frozenset[str]:
    """The ``AS PROCTIME()`` columns among a CREATE statement's."""
    return frozenset(c.name for c in columns if is_proctime(c.generated))


def relation_proctime(rel: Relation) -> frozenset[str]:
    """The ``AS PROCTIME()`` columns of a SOURCE, from its stored definition (the catalog keeps
    only the connector's generated columns)."""
    if rel.kind is not RelationKind.SOURCE or "proctime" not in rel.definition.lower():
        return frozenset()
    stmt = parse_one(rel.definition)
    return proctime_columns(stmt.columns) if isinstance(stmt, ast.CreateSource) else frozenset()


def connector_spec(spec: SourceSpec, proctime: frozenset[str]) -> SourceSpec:
    """`spec` without the ``AS PROCTIME()`` columns: what the connector itself produces."""
    if not proctime:
        return spec
    return replace(spec, columns=tuple(c for c in spec.columns if c[0] not in proctime))


def source_spec(rel: Relation, column_indices: Sequence[int]) -> SourceSpec:
    """What a connector must read for a SOURCE (or a table WITH a connector) of the catalog."""
    props = {k.lower(): v for k, v in rel.properties.items()}
    info = rel.source or SourceInfo()
    columns = tuple((rel.columns[i].name, rel.columns[i].data_type) for i in column_indices)
    names = {c for c, _ in columns}
    return SourceSpec(
        name=rel.name,
        connector=props.get("connector", ""),
        columns=columns,
        options=props,
        encode=info.encode,
        encode_options=dict(info.encode_options),
        generated=frozenset(info.generated),
        format=info.format,
        include=tuple(i for i in info.include if i[1] in names),
    )


def definition_source_spec(rel: Relation, columns: tuple[tuple[str, DataType], ...]) -> SourceSpec:
    """The spec of a SOURCE or connector TABLE as its stored definition declares it, reading
    `columns` (what a planned source node reads)."""
    stmt = parse_one(rel.definition)
    if not isinstance(stmt, ast.CreateSource | ast.CreateTable):
        raise PiestreamError(
            f'the definition of "{rel.name}" is not a CREATE SOURCE / TABLE', sqlstate="XX000"
        )
    spec = statement_source_spec(
        rel.name,
        stmt.columns,
        stmt.with_options,
        stmt.format_encode,
        stmt.includes,
        proctime_ok=isinstance(stmt, ast.CreateSource),
    )
    names = {c for c, _ in columns}
    return replace(spec, columns=columns, include=tuple(i for i in spec.include if i[1] in names))
