"""The connector spec (`SourceSpec`) of a source: from its CREATE statement, or from its catalog
entry when a streaming job reads it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.common.types import DataType
from piestream.frontend.catalog import Relation, SourceInfo
from piestream.frontend.parser import ast, parse_one
from piestream.plan.source import SourceSpec


def statement_source_spec(
    name: str,
    columns: Sequence[ast.ColumnDef],
    options: dict[str, str],
    format_encode: ast.FormatEncode | None,
) -> SourceSpec:
    """The connector spec of CREATE SOURCE / CREATE TABLE ... WITH (connector = ...): the
    declared columns, the WITH options (keys lower-case) and FORMAT ... ENCODE."""
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
    names = [n for n, _ in cols]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PiestreamError(f'column "{dup}" specified more than once', sqlstate="42701")
    if not cols:
        raise PiestreamError("a source needs at least one column", sqlstate="42601")
    fe = format_encode
    if fe is not None and fe.format.lower() not in ("plain", "native", "none"):
        raise FeatureNotSupported(f"FORMAT {fe.format.upper()} is not supported (only PLAIN)")
    return SourceSpec(
        name=name,
        connector=connector,
        columns=tuple(cols),
        options=opts,
        encode=None if fe is None else fe.encode.lower(),
        encode_options={} if fe is None else {k.lower(): v for k, v in fe.options.items()},
        generated=frozenset(generated),
    )


def source_spec(rel: Relation, column_indices: Sequence[int]) -> SourceSpec:
    """What a connector must read for a SOURCE (or a table WITH a connector) of the catalog."""
    props = {k.lower(): v for k, v in rel.properties.items()}
    info = rel.source or SourceInfo()
    return SourceSpec(
        name=rel.name,
        connector=props.get("connector", ""),
        columns=tuple((rel.columns[i].name, rel.columns[i].data_type) for i in column_indices),
        options=props,
        encode=info.encode,
        encode_options=dict(info.encode_options),
        generated=frozenset(info.generated),
    )


def definition_source_spec(rel: Relation, columns: tuple[tuple[str, DataType], ...]) -> SourceSpec:
    """The spec of a SOURCE or connector TABLE as its stored definition declares it, reading
    `columns` (what a planned source node reads)."""
    stmt = parse_one(rel.definition)
    if not isinstance(stmt, ast.CreateSource | ast.CreateTable):
        raise PiestreamError(
            f'the definition of "{rel.name}" is not a CREATE SOURCE / TABLE', sqlstate="XX000"
        )
    spec = statement_source_spec(rel.name, stmt.columns, stmt.with_options, stmt.format_encode)
    return replace(spec, columns=columns)
