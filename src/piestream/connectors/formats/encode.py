"""Encoders shared by the message sinks: Arrow columns -> one JSON document per row, built a
column at a time with Arrow compute (each column's values become JSON literals, then the
documents are joined element-wise), never a Python dict per row.

A column whose type has no Arrow kernel for its JSON form (bytes as base64, intervals, times,
lists, structs) is encoded value by value with `json.dumps` (its reason: the kernel is missing);
the other columns stay vectorised. The output equals `json.dumps` of the row (`row_json`, the
reference the tests compare with) up to number spelling and non-ASCII text left unescaped.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NULL = "null"
#: JSON escapes Arrow can apply with a substring replace, in order (the backslash first)
_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))


def json_default(v: Any) -> Any:
    """JSON for values `json` has no rule for (the per-value path and the reference)."""
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return str(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError(f"cannot encode {type(v).__name__} as JSON")


def row_json(row: dict[str, Any]) -> bytes:
    """One row as a JSON document, value by value (the reference; small things like markers)."""
    return json.dumps(row, default=json_default, separators=(",", ":")).encode()


#: the bytes a JSON string literal cannot hold as they are (control characters, quote, backslash)
_ESCAPED = np.zeros(256, np.bool_)
_ESCAPED[:0x20] = True
_ESCAPED[[ord('"'), ord("\\")]] = True


def _needs_escapes(s: pa.Array) -> bool:
    """Whether some value of a string array holds a byte JSON must escape: one table look-up
    over the array's value bytes (usually none do, and the escape passes are skipped). Bytes
    under null slots count too, which can only send the array the careful way."""
    if not len(s):
        return False
    _, offsets, data = s.buffers()
    if data is None:
        return False
    offs = np.frombuffer(offsets, np.int32)[s.offset : s.offset + len(s) + 1]
    return bool(_ESCAPED[np.frombuffer(data, np.uint8)[int(offs[0]) : int(offs[-1])]].any())


#: a JSON literal as pieces for `pc.binary_join_element_wise`: texts the same in every row
#: (quotes, separators) and string arrays; a null in any array piece is a null literal
Parts = list[str | pa.Array]


def _escaped(s: pa.Array) -> pa.Array | None:
    """Strings with JSON's escapes applied; None when a control character needs a \\u escape."""
    if _needs_escapes(s):
        if pc.any(pc.match_substring_regex(s, "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]")).as_py():
            return None
        for a, b in _ESCAPES:
            if pc.any(pc.match_substring(s, a)).as_py():
                s = pc.replace_substring(s, a, b)
    return s


@functools.cache
def _times_of_day() -> pa.Array:
    """The text HH:MM:SS of each second of a day, whole-second times are gathered from."""
    return pa.array([f"{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)])


def _timestamp_parts(col: pa.Array) -> Parts:
    """Timestamps as text without a zero microsecond fraction and with +00:00 for UTC (as
    PostgreSQL prints them). Microseconds all whole seconds (checked on the integers, the usual
    case): the date of each day in the column's range and the time of each second of the day
    gathered from small tables of text (a timestamp cast to text is most of a row's encoding).
    Else the zero fractions are cut per value by a regex."""
    t = col.type
    ints = pc.fill_null(col.cast(pa.int64()), 0).to_numpy()
    if t.unit == "us" and not (ints % 1_000_000).any():
        secs = ints // 1_000_000
        days = secs // 86_400
        nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), np.bool_) if col.null_count else None
        valid = days if nulls is None else days[~nulls]
        lo, hi = (int(valid.min()), int(valid.max())) if len(valid) else (0, 0)
        if hi - lo < len(days):  # the dates of the range, gathered per row
            table = pc.cast(pa.array(np.arange(lo, hi + 1, dtype=np.int32), pa.date32()), pa.string())
            dates = table.take(pa.array(days - lo, mask=nulls))
        else:  # a few rows over a wide range: each row's date cast on its own
            dates = pc.cast(pa.array(days.astype(np.int32), pa.date32(), mask=nulls), pa.string())
        times = _times_of_day().take(pa.array(secs - days * 86_400, mask=nulls))
        return [dates, " ", times, *(["+00:00"] if t.tz else [])]
    text = pc.replace_substring_regex(pc.cast(col, pa.string()), "\\.000000(Z?)$", "\\1")
    return [pc.replace_substring_regex(text, "Z$", "+00:00") if t.tz else text]


def _literal_parts(col: pa.Array) -> Parts:
    """A column's values as JSON text, in pieces (quotes are pieces, not a join of their own)."""
    t = col.type
    if pa.types.is_integer(t) or (
        pa.types.is_floating(t) and not pc.any(pc.is_nan(col)).as_py() and not pc.any(pc.is_inf(col)).as_py()
    ):
        return [pc.cast(col, pa.string())]
    if pa.types.is_boolean(t):
        return [pc.if_else(col, "true", "false")]
    text: pa.Array | None = None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = _escaped(col.cast(pa.string()))
    elif pa.types.is_date32(t) or pa.types.is_decimal(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_timestamp(t):
        return ['"', *_timestamp_parts(col), '"']
    if text is not None:
        return ['"', text, '"']
    # per value: no Arrow kernel gives this type's JSON (see the module doc)
    return [pa.array([json.dumps(v, default=json_default) for v in col.to_pylist()], pa.string())]


def _joined(parts: Parts) -> pa.Array:
    """The pieces as one string array; a null piece makes the literal "null"."""
    if len(parts) == 1 and isinstance(parts[0], pa.Array):
        out = parts[0]
    else:
        out = pc.binary_join_element_wise(*parts, "")
    return pc.fill_null(out, NULL) if out.null_count else out


def json_literals(col: pa.Array) -> pa.Array:
    """A column's values as JSON text (a string array, "null" for nulls)."""
    return _joined(_literal_parts(col))


def json_object_parts(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> Parts:
    """The rows' `names` columns as JSON objects, in pieces for one join (`joined`), so that
    an envelope around the objects is pieces of the same join, not a second copy. A column with
    nulls is joined to its literals first, so that its nulls become "null", not null documents.
    Never empty of arrays while the table has a column."""
    if not names:
        return [pa.array(["{}"] * table.num_rows, pa.string())]
    parts: Parts = []
    for i, n in enumerate(names):
        col = table.column(n)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        lit = _literal_parts(col)
        if any(isinstance(p, pa.Array) and p.null_count for p in lit):
            lit = [_joined(lit)]
        parts += [("{" if i == 0 else ",") + json.dumps(n) + ":", *lit]
    parts.append("}")
    return parts


def joined(parts: Parts) -> pa.Array:
    """Pieces (at least one an array) as one string per row, adjacent texts merged first (per
    column, not per row)."""
    merged: Parts = []
    for p in parts:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        else:
            merged.append(p)
    if len(merged) == 1 and isinstance(merged[0], pa.Array):
        return merged[0]
    return pc.binary_join_element_wise(*merged, "")


def json_objects(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pa.Array:
    """The rows' `names` columns as JSON objects, one string per row (one join)."""
    return joined(json_object_parts(table, names))


__all__ = ["joined", "json_default", "json_literals", "json_object_parts", "json_objects", "row_json"]
