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


def _quoted(s: pa.Array) -> pa.Array:
    """Strings as JSON string literals; None when a control character needs a \\u escape."""
    if _needs_escapes(s):
        if pc.any(pc.match_substring_regex(s, "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]")).as_py():
            return None
        for a, b in _ESCAPES:
            if pc.any(pc.match_substring(s, a)).as_py():
                s = pc.replace_substring(s, a, b)
    return pc.binary_join_element_wise('"', s, '"', "")


def _timestamp_text(col: pa.Array) -> pa.Array:
    """Timestamps as text without a zero microsecond fraction and with +00:00 for UTC (as
    PostgreSQL prints them). Microseconds all whole seconds (checked on the integers, the usual
    case) cast at second precision; else the zero fractions are cut per value by a regex."""
    t = col.type
    ints = pc.fill_null(col.cast(pa.int64()), 0).to_numpy()
    if t.unit == "us" and not (ints % 1_000_000).any():
        text = pc.cast(col.cast(pa.timestamp("s", tz=t.tz), safe=False), pa.string())
    else:
        text = pc.replace_substring_regex(pc.cast(col, pa.string()), "\\.000000(Z?)$", "\\1")
    return pc.replace_substring_regex(text, "Z$", "+00:00") if t.tz else text


def json_literals(col: pa.Array) -> pa.Array:
    """A column's values as JSON text (a string array, "null" for nulls)."""
    t = col.type
    out: pa.Array | None = None
    if pa.types.is_integer(t) or (
        pa.types.is_floating(t) and not pc.any(pc.is_nan(col)).as_py() and not pc.any(pc.is_inf(col)).as_py()
    ):
        out = pc.cast(col, pa.string())
    elif pa.types.is_boolean(t):
        out = pc.if_else(col, "true", "false")
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = _quoted(col.cast(pa.string()))
    elif pa.types.is_date32(t):
        out = _quoted(pc.cast(col, pa.string()))
    elif pa.types.is_timestamp(t):
        out = _quoted(_timestamp_text(col))
    elif pa.types.is_decimal(t):
        out = _quoted(pc.cast(col, pa.string()))
    if out is None:  # per value: no Arrow kernel gives this type's JSON (see the module doc)
        out = pa.array([json.dumps(v, default=json_default) for v in col.to_pylist()], pa.string())
    return pc.fill_null(out, NULL)


def json_objects(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pa.Array:
    """The rows' `names` columns as JSON objects, one string per row."""
    if not names:
        return pa.array(["{}"] * table.num_rows, pa.string())
    parts: list[Any] = []
    for i, n in enumerate(names):
        col = table.column(n)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        parts += [("{" if i == 0 else ",") + json.dumps(n) + ":", json_literals(col)]
    parts.append("}")
    return pc.binary_join_element_wise(*parts, "")


__all__ = ["json_default", "json_literals", "json_objects", "row_json"]
