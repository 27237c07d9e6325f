"""to_char(timestamp, pattern): PostgreSQL's datetime template patterns, vectorized.

The pattern (one literal per call, or each distinct per-row pattern) is split into template
tokens (YYYY, MM, DD, HH24, HH12/HH, MI, SS, MS, US, Month/Mon, Day/Dy, AM/PM, Q, WW, IW, DDD,
D, ID, CC, J, TZ, ...; the FM prefix drops padding; "quoted text" and any other characters are
copied). Each token becomes one string column computed from the timestamps with numpy, and the
columns are joined with one Arrow kernel: no Python per row.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.types import TypeKind
from piestream.expr.expr import FuncCall
from piestream.expr.functions.calendar import civil, year_start
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import (
    NOT_CONSTANT,
    USECS_PER_DAY,
    constant_arg,
    scatter,
    temporal_us,
    valid_mask,
)

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

#: Template keywords, longest first where one is a prefix of another (matched case-insensitively;
#: the spelling's case picks upper / capitalized / lower output for names and AM/PM).
_KEYWORDS = [
    "Y,YYY",
    "YYYY",
    "YYY",
    "YY",
    "Y",
    "IYYY",
    "HH24",
    "HH12",
    "HH",
    "MI",
    "SSSSS",
    "SSSS",
    "SS",
    "MS",
    "US",
    "A.M.",
    "P.M.",
    "AM",
    "PM",
    "MONTH",
    "MON",
    "MM",
    "DAY",
    "DDD",
    "DD",
    "DY",
    "D",
    "IDDD",
    "ID",
    "IW",
    "WW",
    "W",
    "Q",
    "CC",
    "J",
    "TZ",
    "OF",
]


@functools.lru_cache(maxsize=128)
def parse_pattern(pattern: str) -> tuple[tuple[str, str, bool], ...]:
    """Tokens as (kind, text, fill_mode): kind "lit" for literal text, else the keyword."""
    out: list[tuple[str, str, bool]] = []
    i, n = 0, len(pattern)
    while i < n:
        fm = False
        if pattern[i : i + 2].upper() == "FM":
            fm, i = True, i + 2
        if i < n and pattern[i] == '"':
            j = i + 1
            buf = []
            while j < n and pattern[j] != '"':
                if pattern[j] == "\\" and j + 1 < n:
                    j += 1
                buf.append(pattern[j])
                j += 1
            out.append(("lit", "".join(buf), False))
            i = j + 1
            continue
        for kw in _KEYWORDS:
            if pattern[i : i + len(kw)].upper() == kw:
                out.append((kw, pattern[i : i + len(kw)], fm))
                i += len(kw)
                break
        else:
            if fm:  # FM not followed by a keyword is plain text
                out.append(("lit", pattern[i - 2 : i], False))
            if i < n:
                ch = pattern[i]
                if ch == "\\" and i + 1 < n:
                    i += 1
                    ch = pattern[i]
                out.append(("lit", ch, False))
                i += 1
    return tuple(out)


def _case(text: str, spelled: str) -> str:
    if spelled.isupper():
        return text.upper()
    if spelled[0].isupper():
        return text
    return text.lower()


class _Parts:
    """Calendar fields of a timestamp column, computed on first use."""

    def __init__(self, us: np.ndarray) -> None:
        self.us = us
        self.days = np.floor_divide(us, USECS_PER_DAY).astype(np.int32)
        self.tod = us - self.days.astype(np.int64) * USECS_PER_DAY

    @functools.cached_property
    def ymd(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return civil(self.days)

    @functools.cached_property
    def hour(self) -> np.ndarray:
        return self.tod // 3_600_000_000

    @functools.cached_property
    def dow(self) -> np.ndarray:
        return np.mod(self.days + 4, 7)

    @functools.cached_property
    def doy(self) -> np.ndarray:
        return self.days - year_start(self.ymd[0]) + 1

    @functools.cached_property
    def iso(self) -> tuple[np.ndarray, np.ndarray]:
        from piestream.expr.functions.datetime import _iso

        return _iso(self.days)


@functools.lru_cache(maxsize=8)
def _digit_rows(width: int) -> np.ndarray:
    """(10**width, width) ASCII digits of 0 .. 10**width - 1, zero-padded."""
    v = np.arange(10**width)
    cols = [(v // 10 ** (width - 1 - k)) % 10 + 48 for k in range(width)]
    return np.stack(cols, axis=1).astype(np.uint8)


def _num(values: np.ndarray, width: int, fm: bool) -> np.ndarray | pa.Array:
    """Zero-padded digits as an (n, width) byte matrix, or a string array (FM, wide values)."""
    if not fm and len(values) and values.min() >= 0 and values.max() < 10**width:
        if width <= 4:
            return _digit_rows(width)[values]
        cols = [(values // 10 ** (width - 1 - k)) % 10 + 48 for k in range(width)]
        return np.stack(cols, axis=1).astype(np.uint8)
    text = pa.array(values).cast(pa.string())
    return text if fm else pc.utf8_lpad(text, width=width, padding="0")


def _words(words: list[str], idx: np.ndarray) -> np.ndarray | pa.Array:
    """words[idx] per row: a byte matrix when all words have one byte length."""
    encoded = [w.encode() for w in words]
    if len({len(b) for b in encoded}) == 1:
        table = np.frombuffer(b"".join(encoded), np.uint8).reshape(len(words), -1)
        return table[idx]
    return pa.array(words).take(pa.array(idx))


def _names(names: list[str], idx: np.ndarray, spelled: str, fm: bool, abbrev: bool) -> np.ndarray | pa.Array:
    words = [_case(w[:3] if abbrev else w, spelled) for w in names]
    if not abbrev and not fm:
        words = [w.ljust(9) for w in words]
    return _words(words, idx)


def _token(kw: str, spelled: str, fm: bool, p: _Parts, tz: bool) -> list[np.ndarray | pa.Array | bytes]:
    """The pieces one template keyword prints (byte matrices, string arrays or constant bytes)."""
    simple: dict[str, Callable[[], np.ndarray | pa.Array | bytes]] = {
        "YYYY": lambda: _num(p.ymd[0], 4, fm),
        "YYY": lambda: _num(p.ymd[0] % 1000, 3, fm),
        "YY": lambda: _num(p.ymd[0] % 100, 2, fm),
        "Y": lambda: _num(p.ymd[0] % 10, 1, fm),
        "IYYY": lambda: _num(p.iso[0], 4, fm),
        "HH24": lambda: _num(p.hour, 2, fm),
        "HH12": lambda: _num((p.hour + 11) % 12 + 1, 2, fm),
        "HH": lambda: _num((p.hour + 11) % 12 + 1, 2, fm),
        "MI": lambda: _num(p.tod // 60_000_000 % 60, 2, fm),
        "SS": lambda: _num(p.tod // 1_000_000 % 60, 2, fm),
        "SSSS": lambda: _num(p.tod // 1_000_000, 1, True),
        "SSSSS": lambda: _num(p.tod // 1_000_000, 1, True),
        "MS": lambda: _num(p.tod // 1000 % 1000, 3, fm),
        "US": lambda: _num(p.tod % 1_000_000, 6, fm),
        "MM": lambda: _num(p.ymd[1], 2, fm),
        "DD": lambda: _num(p.ymd[2], 2, fm),
        "DDD": lambda: _num(p.doy, 3, fm),
        "IDDD": lambda: _num((p.iso[1] - 1) * 7 + np.mod(p.days + 3, 7) + 1, 3, fm),
        "D": lambda: _num(p.dow + 1, 1, False),
        "ID": lambda: _num(np.mod(p.days + 3, 7) + 1, 1, False),
        "IW": lambda: _num(p.iso[1], 2, fm),
        "WW": lambda: _num((p.doy - 1) // 7 + 1, 2, fm),
        "W": lambda: _num((p.ymd[2] - 1) // 7 + 1, 1, False),
        "Q": lambda: _num((p.ymd[1] - 1) // 3 + 1, 1, False),
        "CC": lambda: _num((p.ymd[0] + 99) // 100, 2, fm),
        "J": lambda: _num(p.days + 2_440_588, 1, True),
        "MONTH": lambda: _names(_MONTHS, p.ymd[1] - 1, spelled, fm, abbrev=False),
        "MON": lambda: _names(_MONTHS, p.ymd[1] - 1, spelled, fm, abbrev=True),
        "DAY": lambda: _names(_DAYS, p.dow, spelled, fm, abbrev=False),
        "DY": lambda: _names(_DAYS, p.dow, spelled, fm, abbrev=True),
        "TZ": lambda: _case("UTC", spelled).encode() if tz else b"",
        "OF": lambda: b"+00" if tz else b"",
    }
    if kw == "Y,YYY":
        return [_num(p.ymd[0] // 1000, 1, True), b",", _num(p.ymd[0] % 1000, 3, False)]
    if kw in ("AM", "PM", "A.M.", "P.M."):
        am, pm = ("a.m.", "p.m.") if "." in kw else ("am", "pm")
        words = [am.upper(), pm.upper()] if spelled.isupper() else [am, pm]
        return [_words(words, (p.hour >= 12).astype(np.int64))]
    return [simple[kw]()]


def _as_strings(piece: np.ndarray | pa.Array | bytes, n: int) -> pa.Array | str:
    if isinstance(piece, bytes):
        return piece.decode()
    if isinstance(piece, np.ndarray):
        return _matrix_strings(piece)
    return piece


def _matrix_strings(m: np.ndarray) -> pa.Array:
    """A string array whose row i is the bytes of m[i] (all rows the same width)."""
    n, w = m.shape
    offsets = np.arange(0, (n + 1) * w, w, dtype=np.int64)
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(
            pa.string(),
            n,
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(m))],
        )
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(m)]).cast(
        pa.string()
    )


def format_timestamps(us: np.ndarray, pattern: str, tz: bool) -> pa.Array:
    """to_char of every timestamp (microseconds) with one pattern.

    When every piece has a fixed width (the usual case: no FM), the output is one (n, width)
    byte matrix turned into a string array without any per-row work.
    """
    n = len(us)
    p = _Parts(us)
    pieces: list[np.ndarray | pa.Array | bytes] = []
    for kind, text, fm in parse_pattern(pattern):
        pieces.extend([text.encode()] if kind == "lit" else _token(kind, text, fm, p, tz))
    if all(isinstance(x, bytes) for x in pieces):
        return pa.array([b"".join(x for x in pieces if isinstance(x, bytes)).decode()] * n, pa.string())
    if all(isinstance(x, np.ndarray | bytes) for x in pieces):
        cols = [
            np.broadcast_to(np.frombuffer(x, np.uint8), (n, len(x))) if isinstance(x, bytes) else x
            for x in pieces
        ]
        return _matrix_strings(np.concatenate(cols, axis=1))
    return pc.binary_join_element_wise(*[_as_strings(x, n) for x in pieces], "")


@register("to_char")
def _to_char(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    x = a[0]
    tz = call.args[0].return_type.kind is TypeKind.TIMESTAMPTZ
    us = np.where(np.asarray(x.is_valid().to_numpy(zero_copy_only=False)), temporal_us(x), 0)
    pattern = constant_arg(call, 1)
    if pattern is None:
        return pa.nulls(n, pa.string())
    if pattern is not NOT_CONSTANT:
        out = format_timestamps(us, pattern, tz)
    else:  # one vectorized pass per distinct pattern
        pats = a[1]
        enc = pats.dictionary_encode()
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        pieces = []
        for k, pat in enumerate(enc.dictionary.to_pylist()):
            rows = np.flatnonzero(codes == k)
            pieces.append((rows, format_timestamps(us[rows], pat, tz)))
        out = scatter(n, pieces, pa.string())
        x = pc.if_else(pc.is_valid(pats), x, pa.nulls(n, x.type))
    valid = valid_mask(x)
    return out if valid is None else pc.if_else(pa.array(valid), out, pa.nulls(n, pa.string()))
