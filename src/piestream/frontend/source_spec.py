"""The connector spec (`SourceSpec`) of a source: from its CREATE statement, or from its catalog
entry when a streaming job reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import BYTEA, TIMESTAMPTZ, VARCHAR, DataType
from piestream.frontend.catalog import Relation, SourceInfo
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
) -> SourceSpec:
    """The connector spec of CREATE SOURCE / CREATE TABLE ... WITH (connector = ...): the
    declared columns, then the INCLUDE columns, the WITH options (keys lower-case) and
    FORMAT ... ENCODE (checked against the connector's pairs: 0A000 otherwise)."""
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
        if c.generated is not None:
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
    spec = statement_source_spec(rel.name, stmt.columns, stmt.with_options, stmt.format_encode, stmt.includes)
    names = {c for c, _ in columns}
    return replace(spec, columns=columns, include=tuple(i for i in spec.include if i[1] in names))
