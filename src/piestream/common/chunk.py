"""DataChunk and StreamChunk (seed 004, "In-Memory Encoding").

A DataChunk is a list of Arrow columns of equal length plus an optional visibility mask: filtering
a chunk only flips visibility and leaves the columns untouched. A StreamChunk adds an ``ops``
column: Insert, Delete, UpdateDelete or UpdateInsert per row. Rows move between executors (and
across Spark) as whole chunks, never one Python object per row.

The pretty-form (``StreamChunk.from_pretty`` / ``to_pretty``) writes a chunk as a small text table,
one row per line, like RisingWave's test helpers::

     I  T
     +  1 foo
     -  2 .
     U- 3 bar
     U+ 3 baz D

The header line holds the column types (short codes or SQL names); ``.`` is NULL; a trailing ``D``
marks an invisible row; values use the PostgreSQL text form and may be quoted.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import InvalidInput
from piestream.common.scalar import Datum, Row, columns_to_rows, rows_to_columns
from piestream.common.text import format_datum, parse_datum
from piestream.common.types import SHORT_CODES, DataType, from_arrow, parse_type


class Op(enum.IntEnum):
    """The operation of one row of a change stream (seed 003)."""

    INSERT = 1
    DELETE = 2
    UPDATE_DELETE = 3
    UPDATE_INSERT = 4

    @property
    def is_insert(self) -> bool:
        """Insert and UpdateInsert add a row."""
        return self in (Op.INSERT, Op.UPDATE_INSERT)

    @property
    def pretty(self) -> str:
        return _OP_PRETTY[self]


_OP_PRETTY = {Op.INSERT: "+", Op.DELETE: "-", Op.UPDATE_DELETE: "U-", Op.UPDATE_INSERT: "U+"}
_PRETTY_OP = {v: k for k, v in _OP_PRETTY.items()}
_CODE_OF = {t: code for code, t in SHORT_CODES.items()}


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


class DataChunk:
    """Arrow columns + visibility. `visibility` is None when every row is visible."""

    __slots__ = ("_len", "columns", "visibility")

    def __init__(
        self,
        columns: Sequence[pa.Array],
        visibility: np.ndarray | None = None,
        length: int | None = None,
    ) -> None:
        self.columns: list[pa.Array] = [_as_array(c) for c in columns]
        if length is None:
            if not self.columns:
                raise ValueError("a chunk without columns needs an explicit length")
            length = len(self.columns[0])
        for c in self.columns:
            if len(c) != length:
                raise ValueError(f"column length {len(c)} != chunk length {length}")
        if visibility is not None:
            visibility = np.asarray(visibility, dtype=np.bool_)
            if len(visibility) != length:
                raise ValueError("visibility length differs from chunk length")
            if visibility.all():
                visibility = None
        self._len = length
        self.visibility: np.ndarray | None = visibility

    # -- size -----------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Number of physical rows, visible or not."""
        return self._len

    @property
    def cardinality(self) -> int:
        """Number of visible rows."""
        return self._len if self.visibility is None else int(self.visibility.sum())

    def __len__(self) -> int:
        return self.cardinality

    @property
    def types(self) -> list[DataType]:
        return [from_arrow(c.type) for c in self.columns]

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Datum]], types: Sequence[DataType]) -> DataChunk:
        return cls(rows_to_columns(rows, types), length=len(rows))

    @classmethod
    def from_arrow(cls, data: pa.RecordBatch | pa.Table) -> DataChunk:
        if isinstance(data, pa.Table):
            data = data.combine_chunks()
            cols = [c.combine_chunks() for c in data.columns]
        else:
            cols = list(data.columns)
        return cls(cols, length=data.num_rows)

    # -- transforming ---------------------------------------------------------------------------
    def visible_indices(self) -> np.ndarray:
        return np.arange(self._len) if self.visibility is None else np.flatnonzero(self.visibility)

    def compact(self) -> DataChunk:
        """The same visible rows with no invisible ones left."""
        if self.visibility is None:
            return self
        mask = pa.array(self.visibility)
        return DataChunk([c.filter(mask) for c in self.columns], length=self.cardinality)

    def with_visibility(self, visibility: np.ndarray | None) -> DataChunk:
        """Same columns with `visibility` AND-ed into the current one."""
        return DataChunk(self.columns, _and_vis(self.visibility, visibility), self._len)

    def project(self, indices: Sequence[int]) -> DataChunk:
        return DataChunk([self.columns[i] for i in indices], self.visibility, self._len)

    def take(self, indices: np.ndarray | pa.Array) -> DataChunk:
        """Rows at physical `indices`, all visible."""
        idx = pa.array(indices, type=pa.int64()) if not isinstance(indices, pa.Array) else indices
        return DataChunk([c.take(idx) for c in self.columns], length=len(idx))

    def slice(self, offset: int, length: int) -> DataChunk:
        vis = None if self.visibility is None else self.visibility[offset : offset + length]
        return DataChunk([c.slice(offset, length) for c in self.columns], vis, length)

    def split(self, max_rows: int) -> list[DataChunk]:
        """Compact, then cut into chunks of at most `max_rows` rows."""
        c = self.compact()
        return [c.slice(i, min(max_rows, c._len - i)) for i in range(0, c._len, max_rows)] or [c]

    @classmethod
    def concat(cls, chunks: Sequence[DataChunk]) -> DataChunk:
        """One chunk holding the visible rows of all `chunks` (same column types)."""
        if not chunks:
            raise ValueError("concat of no chunks")
        parts = [c.compact() for c in chunks]
        ncols = len(parts[0].columns)
        cols = [pa.concat_arrays([p.columns[i] for p in parts]) for i in range(ncols)]
        return cls(cols, length=sum(p._len for p in parts))

    # -- reading --------------------------------------------------------------------------------
    def to_rows(self, types: Sequence[DataType] | None = None) -> list[Row]:
        """Visible rows as tuples of Python datums."""
        c = self.compact()
        if not c.columns:
            return [()] * c._len
        return columns_to_rows(c.columns, types if types is not None else c.types)

    def to_record_batch(self, names: Sequence[str] | None = None) -> pa.RecordBatch:
        c = self.compact()
        names = list(names) if names is not None else [f"c{i}" for i in range(len(c.columns))]
        return pa.RecordBatch.from_arrays(c.columns, names=names)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DataChunk) or isinstance(other, StreamChunk):
            return NotImplemented
        a, b = self.compact(), other.compact()
        return a._len == b._len and all(x.equals(y) for x, y in zip(a.columns, b.columns, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DataChunk(cardinality={self.cardinality}, columns={len(self.columns)})"


def _and_vis(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


#: The Arrow schema metadata key by which a source reader marks a batch as `StreamChunk.new_keys`.
NEW_KEYS_METADATA = b"piestream.new_keys"


class StreamChunk(DataChunk):
    """A DataChunk plus an ``ops`` column (np.int8 values of `Op`).

    `new_keys` is a source's hint: every row is an Insert whose stream key no earlier row of the
    stream had (a CDC snapshot's chunk: the keys after the copy's cursor), so the Materialize of
    the table that stream alone feeds may skip its conflict lookup. The transformations keeping
    a subset of the rows in their order keep it (compact, slice, split, visibility, a concat of
    hinted chunks); the others drop it (False is always correct)."""

    __slots__ = ("new_keys", "ops")

    def __init__(
        self,
        ops: np.ndarray | Sequence[int],
        columns: Sequence[pa.Array],
        visibility: np.ndarray | None = None,
        length: int | None = None,
        new_keys: bool = False,
    ) -> None:
        ops_arr = np.asarray(ops, dtype=np.int8)
        super().__init__(columns, visibility, len(ops_arr) if length is None else length)
        if len(ops_arr) != self._len:
            raise ValueError("ops length differs from chunk length")
        self.ops: np.ndarray = ops_arr
        self.new_keys = new_keys

    def with_new_keys(self, new_keys: bool) -> StreamChunk:
        """The same chunk with the hint set as given (`new_keys`)."""
        if new_keys == self.new_keys:
            return self
        return StreamChunk(self.ops, self.columns, self.visibility, self._len, new_keys)

    # -- building -------------------------------------------------------------------------------
    @classmethod
    def inserts(cls, data: DataChunk) -> StreamChunk:
        """Every visible row of `data` as an Insert."""
        return cls(np.full(data.capacity, Op.INSERT, np.int8), data.columns, data.visibility, data.capacity)

    @classmethod
    def from_rows(  # type: ignore[override]
        cls, rows: Sequence[tuple[Op, Sequence[Datum]]], types: Sequence[DataType]
    ) -> StreamChunk:
        """From (op, row) pairs."""
        cols = rows_to_columns([r for _, r in rows], types)
        return cls(np.array([int(op) for op, _ in rows], np.int8), cols, length=len(rows))

    @classmethod
    def from_data(cls, ops: np.ndarray, data: DataChunk) -> StreamChunk:
        return cls(ops, data.columns, data.visibility, data.capacity)

    @property
    def data(self) -> DataChunk:
        """The columns and visibility without the ops."""
        return DataChunk(self.columns, self.visibility, self._len)

    # -- transforming ---------------------------------------------------------------------------
    def compact(self) -> StreamChunk:
        if self.visibility is None:
            return self
        mask = pa.array(self.visibility)
        return StreamChunk(
            self.ops[self.visibility],
            [c.filter(mask) for c in self.columns],
            length=self.cardinality,
            new_keys=self.new_keys,
        )

    def with_visibility(self, visibility: np.ndarray | None) -> StreamChunk:
        return StreamChunk(
            self.ops, self.columns, _and_vis(self.visibility, visibility), self._len, self.new_keys
        )

    def project(self, indices: Sequence[int]) -> StreamChunk:
        return StreamChunk(self.ops, [self.columns[i] for i in indices], self.visibility, self._len)

    def with_columns(self, columns: Sequence[pa.Array]) -> StreamChunk:
        return StreamChunk(self.ops, columns, self.visibility, self._len)

    def take(self, indices: np.ndarray | pa.Array) -> StreamChunk:
        idx = np.asarray(indices, dtype=np.int64)
        return StreamChunk(self.ops[idx], [c.take(pa.array(idx)) for c in self.columns], length=len(idx))

    def slice(self, offset: int, length: int) -> StreamChunk:
        vis = None if self.visibility is None else self.visibility[offset : offset + length]
        return StreamChunk(
            self.ops[offset : offset + length],
            [c.slice(offset, length) for c in self.columns],
            vis,
            length,
            self.new_keys,
        )

    def split(self, max_rows: int) -> list[StreamChunk]:  # type: ignore[override]
        """Compact, then cut into chunks of at most `max_rows` rows, never separating a U-/U+ pair."""
        c = self.compact()
        out: list[StreamChunk] = []
        i = 0
        while i < c._len:
            end = min(i + max_rows, c._len)
            if end < c._len and c.ops[end - 1] == Op.UPDATE_DELETE and end - i > 1:
                end -= 1
            out.append(c.slice(i, end - i))
            i = end
        return out or [c]

    @classmethod
    def concat(cls, chunks: Sequence[DataChunk]) -> StreamChunk:
        if not chunks:
            raise ValueError("concat of no chunks")
        parts = [c.compact() for c in chunks]
        assert all(isinstance(p, StreamChunk) for p in parts)
        ncols = len(parts[0].columns)
        cols = [pa.concat_arrays([p.columns[i] for p in parts]) for i in range(ncols)]
        ops = np.concatenate([p.ops for p in parts if isinstance(p, StreamChunk)])
        hinted = all(isinstance(p, StreamChunk) and p.new_keys for p in parts)  # in stream order
        return cls(ops, cols, length=len(ops), new_keys=hinted)

    def insert_mask(self) -> np.ndarray:
        """True for Insert / UpdateInsert rows."""
        return (self.ops == Op.INSERT) | (self.ops == Op.UPDATE_INSERT)

    def signs(self) -> np.ndarray:
        """+1 for rows that add, -1 for rows that retract (np.int64), visibility ignored."""
        return np.where(self.insert_mask(), 1, -1).astype(np.int64)

    # -- reading --------------------------------------------------------------------------------
    def to_records(self, types: Sequence[DataType] | None = None) -> list[tuple[Op, Row]]:
        """Visible rows as (op, row) pairs."""
        c = self.compact()
        rows = DataChunk.to_rows(c, types)
        return [(Op(int(o)), r) for o, r in zip(c.ops, rows, strict=True)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamChunk):
            return NotImplemented
        a, b = self.compact(), other.compact()
        return (
            a._len == b._len
            and bool(np.array_equal(a.ops, b.ops))
            and all(x.equals(y) for x, y in zip(a.columns, b.columns, strict=True))
        )

    __hash__ = None

    def __repr__(self) -> str:
        try:
            return "StreamChunk(\n" + self.to_pretty() + ")"
        except Exception:  # repr must never fail
            return f"StreamChunk(cardinality={self.cardinality}, columns={len(self.columns)})"

    # -- pretty form ----------------------------------------------------------------------------
    @classmethod
    def from_pretty(cls, text: str, types: Sequence[DataType] | None = None) -> StreamChunk:
        """Parse the pretty-form (see module docstring). Without `types` the first line is a header."""
        lines = [ln.strip() for ln in text.strip("\n").split("\n")]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
        has_header = bool(lines) and _split_line(lines[0])[0] not in _PRETTY_OP
        if has_header:
            header = _parse_header(lines.pop(0))
            types = header if types is None else types
        if types is None:
            raise InvalidInput("pretty chunk needs a header line with the column types")
        ops: list[int] = []
        vis: list[bool] = []
        rows: list[list[Datum]] = []
        for ln in lines:
            toks = _split_line(ln)
            op_tok, vals = toks[0], toks[1:]
            if op_tok not in _PRETTY_OP:
                raise InvalidInput(f"pretty chunk: unknown op {op_tok!r} in line {ln!r}")
            visible = True
            if len(vals) == len(types) + 1 and vals[-1] == "D" and not isinstance(vals[-1], _Quoted):
                vals, visible = vals[:-1], False
            if len(vals) != len(types):
                raise InvalidInput(f"pretty chunk: line {ln!r} has {len(vals)} values, expected {len(types)}")
            ops.append(_PRETTY_OP[op_tok])
            vis.append(visible)
            rows.append(
                [
                    None if v == "." and not isinstance(v, _Quoted) else parse_datum(v, t)
                    for v, t in zip(vals, types, strict=True)
                ]
            )
        cols = rows_to_columns(rows, types)
        if not cols:
            return cls(np.array(ops, np.int8), [], np.array(vis), len(ops))
        return cls(np.array(ops, np.int8), cols, np.array(vis), len(ops))

    def to_pretty(self, types: Sequence[DataType] | None = None) -> str:
        """Print as the pretty-form; `from_pretty` of the result equals this chunk."""
        types = list(types) if types is not None else self.types
        header = [_CODE_OF.get(t) or _quote(str(t)) for t in types]
        cols = [
            [("." if v is None else _quote(format_datum(v, t))) for v in _col_values(c, t)]
            for c, t in zip(self.columns, types, strict=True)
        ]
        table: list[list[str]] = [["", *header]]
        for i in range(self._len):
            row = [Op(int(self.ops[i])).pretty] + [col[i] for col in cols]
            if self.visibility is not None and not self.visibility[i]:
                row.append("D")
            table.append(row)
        width = max(len(r) for r in table)
        widths = [max(len(r[j]) for r in table if j < len(r)) for j in range(width)]
        return "".join(
            " ".join(cell.ljust(widths[j]) for j, cell in enumerate(r)).rstrip() + "\n" for r in table
        )


def _col_values(col: pa.Array, t: DataType) -> Iterator[Datum]:
    from piestream.common.scalar import from_arrow as _from_arrow

    return iter(_from_arrow(col, t))


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}


def _quote(s: str) -> str:
    """A token for the pretty form: bare if unambiguous, else double-quoted with escapes."""
    if s and s not in (".", "D") and not s.startswith('"') and not any(ch.isspace() for ch in s):
        return s
    body = "".join(_ESCAPES.get(ch) or (ch if ch.isprintable() else _hex_escape(ch)) for ch in s)
    return f'"{body}"'


def _hex_escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


class _Quoted(str):
    """A token that was written in double quotes (so "." is a string, not NULL)."""


def _split_line(line: str) -> list[str]:
    """Whitespace-separated tokens; a token starting with a double quote runs to the closing
    quote and may contain backslash escapes (\\n, \\t, \\", \\\\, \\xHH)."""
    toks: list[str] = []
    i, n = 0, len(line)
    while i < n:
        if line[i].isspace():
            i += 1
            continue
        if line[i] != '"':
            j = i
            while j < n and not line[j].isspace():
                j += 1
            toks.append(line[i:j])
            i = j
            continue
        out: list[str] = []
        i += 1
        while True:
            if i >= n:
                raise InvalidInput(f"pretty chunk: unterminated quote in line {line!r}")
            ch = line[i]
            if ch == '"':
                i += 1
                break
            if ch == "\\" and i + 1 < n:
                nxt = line[i + 1]
                width = {"x": 2, "u": 4, "U": 8}.get(nxt)
                if width is not None and i + 1 + width < n:
                    out.append(chr(int(line[i + 2 : i + 2 + width], 16)))
                    i += 2 + width
                    continue
                out.append(_UNESCAPES.get(nxt, nxt))
                i += 2
                continue
            out.append(ch)
            i += 1
        toks.append(_Quoted("".join(out)))
    return toks


def _parse_header(line: str) -> list[DataType]:
    return [parse_type(tok) for tok in _split_line(line)]


def vis_or_all(chunk: DataChunk) -> np.ndarray:
    """The visibility mask, materialized."""
    return np.ones(chunk.capacity, np.bool_) if chunk.visibility is None else chunk.visibility


def filter_mask(mask: pa.Array) -> np.ndarray:
    """A boolean Arrow array as a numpy mask where NULL counts as false (SQL WHERE semantics)."""
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=np.bool_)
