"""Vectorized access into a jsonb column: `->`, `->>` and `#>` / `#>>` steps as numpy passes.

A jsonb value is stored as its normalized text (common/text.py: `jsonb_text`): keys of an object
in jsonb order, separators exactly ``", "`` and ``": "``, strings escaped as JSON with non-ASCII
kept. That form lets the whole column be read structurally at once instead of a `json.loads`
per row: a few vectorized passes over the column's UTF-8 bytes find the real quotes (not preceded
by an odd run of backslashes), the structural bytes outside strings, and their nesting depth (a
cumulative sum over those bytes). The members of each row's top-level container are then the bytes at
depth 1: its commas separate the members, its colons end the keys. Looking a key up is a
comparison of the key bytes before each top-level colon with the escaped key; an array element
is a position between top-level commas. The answer of every row is a byte range, gathered into a
new string column with one fancy index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.expr.functions.vec import scatter

_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93


@dataclass
class Slices:
    """One byte range [start, end) of `data` per row in `rows` (ascending); other rows are NULL."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray


class Layout:
    """The top-level structure of every row of a jsonb (or json text) column."""

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        self.n = n
        valid = np.ones(n, np.bool_) if arr.null_count == 0 else _valid(arr)
        if arr.null_count:
            arr = arr.fill_null("null")  # garbage under NULL slots must not unbalance the scan
        offs = np.frombuffer(arr.buffers()[1], np.int32, count=arr.offset + n + 1)[arr.offset :]
        offs = offs.astype(np.int64)
        buf = arr.buffers()[2]
        data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
        base = int(offs[0]) if n else 0
        self.data = data[base : int(offs[-1])] if n else data[:0]
        offs = offs - base
        self.starts, self.ends = offs[:-1], offs[1:]
        self.valid = valid
        d = self.data
        quote = d == _QUOTE
        quotes = np.flatnonzero(quote)
        self.backslashes = np.flatnonzero(d == _BACKSLASH)
        self.has_backslash = len(self.backslashes) > 0
        if self.has_backslash:
            escaped = _escaped_quotes(d, quote, self.backslashes)
            quotes = np.delete(quotes, np.searchsorted(quotes, escaped))
        # the structural bytes outside strings (an even number of real quotes before them);
        # (d & 0xD9) == 0x59 is {}[] and bytes that occur only inside strings (Y _ y DEL)
        pos = np.flatnonzero((d == _COMMA) | (d == _COLON) | ((d & 0xD9) == 0x59))
        pos = pos[(np.searchsorted(quotes, pos) & 1) == 0]
        sym = d[pos]
        depth = np.cumsum(_STEP[sym], dtype=np.int32)  # depth after each structural byte
        top = depth == 1
        self.commas = pos[top & (sym == _COMMA)]
        colon_at = np.flatnonzero(top & (sym == _COLON))
        self.colons = pos[colon_at]
        # a key's opening quote follows the `{` or `, ` before it: nothing between is structural
        before = np.maximum(colon_at - 1, 0)
        self.key_starts = pos[before] + np.where(sym[before] == _LBRACE, 2, 3)
        nonempty = self.ends > self.starts
        first = np.zeros(n, np.uint8)
        first[nonempty] = d[self.starts[nonempty]]
        self.first = np.where(valid, first, 0)

    def row_of(self, pos: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ends, pos, side="right")

    def key(self, key: str) -> Slices:
        """The value of `key` in each row that is an object holding it."""
        needle = np.frombuffer(json.dumps(key, ensure_ascii=False)[1:-1].encode(), np.uint8)
        colons = self.colons
        if len(colons) == 0:
            return _empty()
        close = colons - 1  # the key's closing quote
        kstart = self.key_starts
        hit = (close - kstart) == len(needle)
        colons, kstart = colons[hit], kstart[hit]
        if len(needle) and len(colons):
            got = self.data[kstart[:, None] + np.arange(len(needle))]
            same = (got == needle).all(axis=1)
            colons = colons[same]
        rows = self.row_of(colons)
        keep = self.valid[rows]
        colons, rows = colons[keep], rows[keep]
        close_row = self.ends[rows] - 1
        nxt = np.searchsorted(self.commas, colons)
        comma = self.commas[np.minimum(nxt, max(len(self.commas) - 1, 0))] if len(self.commas) else close_row
        end = np.where((nxt < len(self.commas)) & (comma < close_row), comma, close_row)
        return Slices(rows, colons + 2, end)

    def index(self, k: int, *, scalars: bool = False) -> Slices:
        """Element `k` (0-based, negative from the end) of each row that is an array holding it.
        With `scalars`, a scalar is a one-element array, as PostgreSQL's `->` (not `#>`) reads it:
        its jsonb stores a scalar as a "raw scalar" array."""
        rows = np.flatnonzero((self.first == _LBRACKET) & (self.ends - self.starts > 2))
        out = self._elements(rows, k)
        if scalars and k in (0, -1):
            lone = np.flatnonzero(self.valid & (self.first != _LBRACKET) & (self.first != _LBRACE))
            out = union([out, Slices(lone, self.starts[lone], self.ends[lone])])
        return out

    def _elements(self, rows: np.ndarray, k: int) -> Slices:
        first_comma = np.searchsorted(self.commas, self.starts[rows])
        count = np.searchsorted(self.commas, self.ends[rows]) - first_comma + 1
        kk = count + k if k < 0 else np.full(len(rows), k, np.int64)
        ok = (kk >= 0) & (kk < count)
        rows, first_comma, count, kk = rows[ok], first_comma[ok], count[ok], kk[ok]
        if len(rows) == 0:
            return _empty()
        last = max(len(self.commas) - 1, 0)
        commas = self.commas if len(self.commas) else np.zeros(1, np.int64)
        before = commas[np.clip(first_comma + kk - 1, 0, last)] + 2
        after = commas[np.clip(first_comma + kk, 0, last)]
        start = np.where(kk == 0, self.starts[rows] + 1, before)
        end = np.where(kk == count - 1, self.ends[rows] - 1, after)
        return Slices(rows, start, end)

    def gather(self, s: Slices) -> pa.Array:
        """The byte ranges as a string column of all rows (NULL where no range)."""
        return gather(self.data, self.n, s)

    def as_text(self, s: Slices) -> pa.Array:
        """`->>` of the ranges: strings unquoted (and unescaped), JSON null as NULL, the rest as is."""
        first = self.data[s.start] if len(s.rows) else np.zeros(0, np.uint8)
        is_null = first == ord("n")
        is_str = first == _QUOTE
        start = np.where(is_str, s.start + 1, s.start)
        end = np.where(is_str, s.end - 1, s.end)
        keep = ~is_null
        out = Slices(s.rows[keep], start[keep], end[keep])
        escaped = np.zeros(len(out.rows), np.bool_)
        if self.has_backslash and len(out.rows):
            bs = self.backslashes
            escaped = (np.searchsorted(bs, out.end) > np.searchsorted(bs, out.start)) & is_str[keep]
        if not escaped.any():
            return gather(self.data, self.n, out)
        m = len(out.rows)
        vals = gather(self.data, m, Slices(np.arange(m), out.start, out.end))
        hard, easy = np.flatnonzero(escaped), np.flatnonzero(~escaped)
        parts = [(easy, vals.take(easy)), (hard, _unescape(vals.take(hard)))]
        return scatter(self.n, [(out.rows, scatter(m, parts, pa.string()))], pa.string())


#: JSON's two-character escapes; the normalized text writes other characters below U+0020 as \uXXXX
_ESCAPES = [
    ('\\"', '"'),
    ("\\n", "\n"),
    ("\\t", "\t"),
    ("\\r", "\r"),
    ("\\b", "\b"),
    ("\\f", "\f"),
    ("\\/", "/"),
]


def _unescape(arr: pa.Array) -> pa.Array:
    """JSON string bodies with their escapes decoded: without an escaped backslash or a \\u
    escape each escape is a substring replacement over the column; the rest is decoded by json,
    row by row (control characters and backslashes in strings are rare)."""
    hard = pc.or_(pc.match_substring(arr, "\\\\"), pc.match_substring(arr, "\\u")).to_numpy(
        zero_copy_only=False
    )
    easy = np.flatnonzero(~hard)
    out = arr.take(pa.array(easy, pa.int64()))
    for old, new in _ESCAPES:
        out = pc.replace_substring(out, old, new)
    hard_rows = np.flatnonzero(hard)
    decoded = pa.array(
        [json.loads('"' + v + '"') for v in arr.take(pa.array(hard_rows, pa.int64())).to_pylist()],
        pa.string(),
    )
    return scatter(len(arr), [(easy, out), (hard_rows, decoded)], pa.string())


_STEP = np.zeros(256, np.int8)
_STEP[[_LBRACE, _LBRACKET]] = 1
_STEP[[_RBRACE, _RBRACKET]] = -1


def _escaped_quotes(d: np.ndarray, quote: np.ndarray, bs: np.ndarray) -> np.ndarray:
    """Positions of the quotes inside strings: those after an odd run of the backslashes at `bs`
    (worked out on the sparse backslash positions)."""
    cand = bs[1 + bs < len(d)]
    cand = cand[quote[cand + 1]]  # a backslash right before a quote ends a run
    # runs of consecutive backslashes: for each backslash, the index where its run began
    run_start = np.flatnonzero(np.diff(bs, prepend=-2) != 1)
    run_of = np.repeat(run_start, np.diff(np.append(run_start, len(bs))))
    i = np.searchsorted(bs, cand)
    odd = (i - run_of[i] + 1) % 2 == 1
    return cand[odd] + 1


def gather(data: np.ndarray, n: int, s: Slices) -> pa.Array:
    lengths = (s.end - s.start).astype(np.int64)
    out_len = np.zeros(n, np.int64)
    out_len[s.rows] = lengths
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(out_len, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        src = np.repeat(s.start - offsets[s.rows], lengths) + np.arange(total, dtype=np.int64)
        body = data[src]
    else:
        body = np.zeros(0, np.uint8)
    validity = np.zeros(n, np.bool_)
    validity[s.rows] = True
    bitmap = None if validity.all() else pa.py_buffer(np.packbits(validity, bitorder="little"))
    return pa.Array.from_buffers(
        pa.string(), n, [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(body.tobytes())]
    )


def _empty() -> Slices:
    z = np.zeros(0, np.int64)
    return Slices(z, z, z)


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_)


def union(parts: list[Slices]) -> Slices:
    """Slices of disjoint row sets, merged in row order."""
    parts = [p for p in parts if len(p.rows)]
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0]
    rows = np.concatenate([p.rows for p in parts])
    order = np.argsort(rows, kind="stable")
    return Slices(
        rows[order],
        np.concatenate([p.start for p in parts])[order],
        np.concatenate([p.end for p in parts])[order],
    )
