"""COPY over pgwire: bulk load (``COPY t FROM STDIN``) and export (``COPY t | (query) TO STDOUT``)
in PostgreSQL's text and CSV formats, with HEADER, DELIMITER and NULL.

Loading is columnar: pyarrow.csv splits the whole input into string columns, each column is
converted with PostgreSQL's input rules (`from_text`, an Arrow fast path where Arrow's parser
accepts a subset of PostgreSQL's), and the rows go in as one bulk INSERT (`dml.insert_arrow`).
Everything is parsed and checked before any row is submitted, so a malformed line fails the
COPY with its line number and nothing of it is applied.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from piestream.common.errors import FeatureNotSupported, InvalidInput, PiestreamError, UndefinedColumn
from piestream.common.types import DataType, TypeKind
from piestream.frontend.catalog import RelationKind
from piestream.frontend.parser import ast
from piestream.server.results import QueryResult

if TYPE_CHECKING:
    from piestream.server.session import Session


class BadCopyFileFormat(PiestreamError):
    sqlstate = "22P04"


_FAST_KINDS = (
    TypeKind.SMALLINT,
    TypeKind.INT,
    TypeKind.BIGINT,
    TypeKind.REAL,
    TypeKind.DOUBLE,
    TypeKind.DATE,
)
_TEXT_ESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r", "\\b": "\b", "\\f": "\f", "\\v": "\v"}


@dataclass(frozen=True)
class CopyFormat:
    csv: bool
    header: bool
    delimiter: str
    null: str
    binary: bool = False

    @classmethod
    def of(cls, options: dict[str, str]) -> CopyFormat:
        opts = {k.lower(): v for k, v in options.items()}
        fmt = opts.pop("format", "text").lower()
        if fmt not in ("text", "csv", "binary"):
            raise InvalidInput(f'COPY format "{fmt}" not recognized', sqlstate="22023")
        if fmt == "binary":
            for option in ("delimiter", "null", "header"):
                if option in opts:
                    raise PiestreamError(f"cannot specify {option.upper()} in BINARY mode", sqlstate="42601")
            if opts.get("encoding", "utf8").lower().replace("-", "").replace("_", "") == "utf8":
                opts.pop("encoding", None)
            if opts:
                raise FeatureNotSupported(f'COPY option "{sorted(opts)[0]}" is not supported')
            return cls(False, False, "", "", binary=True)
        csv = fmt == "csv"
        header = opts.pop("header", "false").lower() in ("true", "on", "1", "")
        delimiter = opts.pop("delimiter", "," if csv else "\t")
        null = opts.pop("null", "" if csv else "\\N")
        if opts.get("encoding", "utf8").lower().replace("-", "").replace("_", "") == "utf8":
            opts.pop("encoding", None)
        if opts:
            raise FeatureNotSupported(f'COPY option "{sorted(opts)[0]}" is not supported')
        if len(delimiter) != 1:
            raise InvalidInput("COPY delimiter must be a single one-byte character")
        if header and not csv:
            raise FeatureNotSupported("COPY HEADER available only in CSV mode")
        return cls(csv, header, delimiter, null)


def _target(s: Session, stmt: ast.Copy) -> tuple[Any, list[int]]:
    assert stmt.table is not None
    rel = s.catalog().require(stmt.table)
    if rel.kind is not RelationKind.TABLE or rel.table is None:
        raise PiestreamError(f'cannot copy to "{rel.name}": it is a {rel.kind.value}', sqlstate="42809")
    if rel.properties.get("connector"):
        raise FeatureNotSupported(f'cannot copy to table "{rel.name}" with a connector')
    visible = [i for i, c in enumerate(rel.columns) if not c.hidden]
    if not stmt.columns:
        return rel, visible
    out = []
    for name in stmt.columns:
        i = rel.column_index(name)
        if i is None or rel.columns[i].hidden:
            raise UndefinedColumn(f'column "{name}" of relation "{rel.name}" does not exist')
        out.append(i)
    return rel, out


def copy_statement(s: Session, stmt: ast.Copy, params: Sequence[Any] = ()) -> QueryResult:
    """COPY outside pgwire's simple query protocol (where its data has no channel)."""
    raise FeatureNotSupported(
        "COPY FROM STDIN / TO STDOUT needs a pgwire client (psql, psycopg) and the simple query protocol"
    )


def check_copy_from(s: Session, stmt: ast.Copy) -> tuple[int, bool]:
    """Validate before the client sends data: (the number of columns, binary format)."""
    from piestream.server.pgwire import (
        copy_binary,
    )  # pgwire's package imports the session, which imports this

    fmt = CopyFormat.of(stmt.options)
    rel, cols = _target(s, stmt)
    if fmt.binary:
        copy_binary.check_types([rel.columns[i].data_type for i in cols])
    return len(cols), fmt.binary


def copy_from(s: Session, stmt: ast.Copy, data: bytes) -> QueryResult:
    """Parse the whole input, convert every column, then insert it all (or nothing)."""
    from piestream.server import dml
    from piestream.server.pgwire import copy_binary

    fmt = CopyFormat.of(stmt.options)
    rel, cols = _target(s, stmt)
    names = [rel.columns[i].name for i in cols]
    if fmt.binary:
        arrays = copy_binary.decode(data, [rel.columns[i].data_type for i in cols])
        table = pa.table(dict(zip(names, arrays, strict=True))) if names else pa.table({})
        dml.insert_arrow(s, rel.name, table)
        return QueryResult(f"COPY {table.num_rows}")
    text = _strip_end_marker(data)
    strings = _split(text, names, fmt)
    first_line = 2 if fmt.header else 1
    converted = {}
    for name, i in zip(names, cols, strict=True):
        converted[name] = _convert(
            strings.column(name).combine_chunks(), rel.columns[i].data_type, name, first_line
        )
    table = pa.table(converted) if converted else pa.table({})
    dml.insert_arrow(s, rel.name, table)
    return QueryResult(f"COPY {table.num_rows}")


def _strip_end_marker(data: bytes) -> bytes:
    r"""Text-format clients may end with a ``\.`` line (PostgreSQL's end-of-data marker)."""
    if data.endswith(b"\\.\n") and (len(data) == 3 or data[-4:-3] == b"\n"):
        return data[:-3]
    if data.endswith(b"\\.\r\n") and (len(data) == 4 or data[-5:-4] == b"\n"):
        return data[:-4]
    return data


def _split(data: bytes, names: list[str], fmt: CopyFormat) -> pa.Table:
    """The input as string columns (NULLs per the format's rules); bad lines name their number."""
    bad: list[tuple[int | None, str, str]] = []

    def on_invalid(row: Any) -> str:
        what = f"expected {row.expected_columns} columns, got {row.actual_columns}"
        bad.append((row.number, what, row.text))
        return "skip"

    if not data.strip(b"\r\n"):
        return pa.table({n: pa.array([], pa.string()) for n in names})
    parse = pacsv.ParseOptions(
        delimiter=fmt.delimiter,
        quote_char='"' if fmt.csv else False,
        double_quote=fmt.csv,
        escape_char=False,
        newlines_in_values=fmt.csv and b'"' in data,  # only quoted CSV values may hold newlines
        invalid_row_handler=on_invalid,
    )
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        null_values=[fmt.null],
        strings_can_be_null=True,
        quoted_strings_can_be_null=not fmt.csv,  # CSV: "" is an empty string, unquoted empty is NULL
    )
    read = pacsv.ReadOptions(column_names=names, skip_rows=1 if fmt.header else 0, block_size=1 << 24)
    try:
        table = pacsv.read_csv(
            io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert
        )
    except pa.ArrowInvalid as e:
        raise BadCopyFileFormat(f"invalid COPY data: {e}") from None
    if bad:
        number, what, text = bad[0]
        if number is None:  # the error path only: find the line by its text
            lines = data.split(b"\n")
            target = text.encode().rstrip(b"\r")
            number = next((i + 1 for i, ln in enumerate(lines) if ln.rstrip(b"\r") == target), None)
        line = "" if number is None else f", line {number}"
        raise BadCopyFileFormat(f"invalid COPY data{line}: {what}: {text!r}")
    if not fmt.csv:
        table = pa.table({n: _unescape_text(table.column(n).combine_chunks()) for n in names})
    return table


def _unescape_text(col: pa.Array) -> pa.Array:
    r"""Text format's backslash escapes (\t, \n, \\ ...): only values holding a backslash are
    decoded, one by one (rare in bulk data; a per-value loop keeps the common case vectorized)."""
    has = pc.match_substring(col, "\\").fill_null(False)
    if not pc.any(has).as_py():
        return col
    idx = np.flatnonzero(np.asarray(has.to_numpy(zero_copy_only=False), dtype=np.bool_))
    values = col.to_pylist()
    for i in idx:  # per value: only those with escapes
        values[i] = _decode_escapes(values[i])
    return pa.array(values, pa.string())


def _decode_escapes(v: str) -> str:
    out, i = [], 0
    while i < len(v):  # per character of one escaped value
        two = v[i : i + 2]
        if two in _TEXT_ESCAPES:
            out.append(_TEXT_ESCAPES[two])
            i += 2
        elif v[i] == "\\" and i + 1 < len(v):
            out.append(v[i + 1])
            i += 2
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def _convert(col: pa.Array, t: DataType, name: str, first_line: int) -> pa.Array:
    """PostgreSQL's input function for `t` over a column; an error names the value's line."""
    from piestream.expr.functions.cast import from_text

    if t.kind is TypeKind.VARCHAR:
        return col
    if t.kind in _FAST_KINDS:
        try:  # Arrow's parsers accept a subset of PostgreSQL's input for these types
            return col.cast(t.arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    try:
        return from_text(col, t)
    except PiestreamError as e:
        row = _first_bad_row(col, t)
        where = f", line {first_line + row}, column {name}" if row is not None else f", column {name}"
        raise type(e)(f"{e.message} (COPY{where})", sqlstate=e.sqlstate) from None


def _first_bad_row(col: pa.Array, t: DataType) -> int | None:
    """The error path only: the first row whose value does not parse (per value)."""
    from piestream.common.text import parse_datum

    for i, v in enumerate(col.to_pylist()):
        if v is None:
            continue
        try:
            parse_datum(v, t)
        except PiestreamError:
            return i
    return None


# -- COPY TO STDOUT -------------------------------------------------------------------------------


@dataclass
class CopyOut:
    ncols: int
    lines: list[bytes]  # text and csv: one per row (and the header)
    # binary: the whole COPY as ready CopyData messages, encoded batch by batch as they are sent
    messages: Iterator[memoryview] | None = None

    @property
    def binary(self) -> bool:
        return self.messages is not None


def run_copy_to(s: Session, stmt: ast.Copy, out: list[CopyOut], params: Sequence[Any] = ()) -> QueryResult:
    """COPY ... TO STDOUT: the data goes to `out`, the result is the command tag."""
    from piestream.server.pgwire import copy_binary

    fmt = CopyFormat.of(stmt.options)
    table, types, names = _copy_source(s, stmt, params)
    if fmt.binary:
        out.append(CopyOut(len(types), [], copy_binary.encode_stream(table, types)))
    else:
        out.append(CopyOut(len(types), format_rows(table, types, names, fmt)))
    return QueryResult(f"COPY {table.num_rows}")


def _copy_source(
    s: Session, stmt: ast.Copy, params: Sequence[Any] = ()
) -> tuple[pa.Table, list[DataType], list[str]]:
    """The rows a COPY TO sends: its query's, or its table's (columns) at one snapshot."""
    from sqlglot import exp

    from piestream.server.query import bind, run_bound

    if stmt.query is not None:
        query = stmt.query
    else:
        assert stmt.table is not None
        cols: list[exp.Expression] = [exp.column(c) for c in stmt.columns] or [exp.Star()]
        query = exp.select(*cols).from_(exp.to_table(stmt.table))
    bound = bind(s, query, params)
    return run_bound(s, bound), list(bound.types), list(bound.names)


def format_rows(
    table: pa.Table, types: Sequence[DataType], names: Sequence[str], fmt: CopyFormat
) -> list[bytes]:
    from piestream.expr.functions.cast import to_text

    n = table.num_rows
    texts = []
    for i, t in enumerate(types):
        col = to_text(table.column(i).combine_chunks(), t)
        texts.append(_quote_csv(col, fmt) if fmt.csv else _escape_text(col, fmt))
    lines = pc.binary_join_element_wise(*texts, fmt.delimiter) if texts else pa.array([""] * n)
    out = [(line + "\n").encode() for line in lines.to_pylist()]  # one CopyData message per row
    if fmt.header:
        out.insert(0, (fmt.delimiter.join(_quote_header(h, fmt) for h in names) + "\n").encode())
    return out


def _escape_text(col: pa.Array, fmt: CopyFormat) -> pa.Array:
    for raw, esc in (
        ("\\", "\\\\"),
        ("\n", "\\n"),
        ("\r", "\\r"),
        ("\t", "\\t"),
        (fmt.delimiter, "\\" + fmt.delimiter),
    ):
        col = pc.replace_substring(col, raw, esc)
    return col.fill_null(fmt.null)


def _quote_csv(col: pa.Array, fmt: CopyFormat) -> pa.Array:
    import re

    special = "[" + re.escape(fmt.delimiter + '"\r\n') + "]"
    needs = pc.or_(pc.match_substring_regex(col, special), pc.equal(col, fmt.null)).fill_null(False)
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(col, '"', '""'), '"', "")
    return pc.if_else(needs, quoted, col).fill_null(fmt.null)


def _quote_header(h: str, fmt: CopyFormat) -> str:
    if any(c in h for c in (fmt.delimiter, '"', "\n", "\r")):
        return '"' + h.replace('"', '""') + '"'
    return h
