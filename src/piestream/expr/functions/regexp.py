"""LIKE / ILIKE and the POSIX regular expression functions.

LIKE with a literal pattern is one Arrow kernel (``%``, ``_``, backslash escapes); a per-row
pattern is translated to a Python regex per distinct pattern. regexp_match with a literal pattern runs
on Arrow's RE2 kernel (capture groups renamed to named groups); the other regexp_* functions,
and patterns RE2 cannot take, run per row with Python's `re` (PostgreSQL's replacement syntax
has no Arrow kernel): PostgreSQL's ARE syntax is translated for POSIX classes (``[[:alpha:]]``) and word
boundaries (``\\m \\M \\y``); matching is leftmost-first like Perl, where PostgreSQL's engine
prefers the longest match for some alternations (``a|ab``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.errors import InvalidInput
from piestream.common.types import BOOLEAN, VARCHAR, list_of
from piestream.expr.expr import FuncCall
from piestream.expr.functions.registry import register
from piestream.expr.functions.vec import NOT_CONSTANT, constant_arg, per_row, scatter

_LIKE_ESCAPE_ERROR = "22025"  # invalid_escape_sequence
_REGEX_ERROR = "2201B"  # invalid_regular_expression
_INVALID_PARAMETER = "22023"


# -- LIKE -----------------------------------------------------------------------------------------


def _check_like_pattern(pattern: str) -> None:
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if i + 1 == len(pattern):
                raise InvalidInput(
                    "LIKE pattern must not end with escape character", sqlstate=_LIKE_ESCAPE_ERROR
                )
            i += 2
        else:
            i += 1


@functools.lru_cache(maxsize=256)
def like_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """The Python regex equivalent to a LIKE pattern."""
    _check_like_pattern(pattern)
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _like(call: FuncCall, a: list[pa.Array], n: int, *, ignore_case: bool, negate: bool) -> pa.Array:
    pattern = constant_arg(call, 1)
    if pattern is NOT_CONSTANT:
        out = per_row(lambda s, p: like_regex(p, ignore_case).fullmatch(s) is not None, a, BOOLEAN)
    elif pattern is None:
        out = pa.nulls(n, pa.bool_())
    else:
        _check_like_pattern(pattern)
        out = _like_constant(a[0], pattern, ignore_case)
    return pc.invert(out) if negate else out


def _like_constant(s: pa.Array, pattern: str, ignore_case: bool) -> pa.Array:
    """LIKE with a literal pattern: plain substring / prefix / suffix tests when the pattern is
    only ``%`` around literal text (much faster than the regex Arrow's match_like builds)."""
    body = pattern.strip("%")
    if "%" not in body and "_" not in body and "\\" not in body:
        lead, trail = pattern.startswith("%"), pattern.endswith("%")
        if body == "":
            return pc.is_valid(s) if pattern else pc.equal(s, "")
        if lead and trail:
            return pc.match_substring(s, body, ignore_case=ignore_case)
        if trail and not lead:
            return pc.starts_with(s, body, ignore_case=ignore_case)
        if lead:
            return pc.ends_with(s, body, ignore_case=ignore_case)
        if not ignore_case:
            return pc.equal(s, body)
    return pc.match_like(s, pattern=pattern, ignore_case=ignore_case)


for _name, _ic, _neg in (
    ("like", False, False),
    ("ilike", True, False),
    ("not_like", False, True),
    ("not_ilike", True, True),
):

    def _make(ic: bool, neg: bool) -> Any:
        return lambda call, a, n: _like(call, a, n, ignore_case=ic, negate=neg)

    register(_name)(_make(_ic, _neg))


# -- regular expressions --------------------------------------------------------------------------

_POSIX_CLASSES = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r"\s",
    "xdigit": "0-9A-Fa-f",
    "punct": r"!-/:-@\[-`{-~",
    "word": r"\w",
    "blank": r" \t",
    "cntrl": r"\x00-\x1f\x7f",
    "print": r"\x20-\x7e",
    "graph": r"\x21-\x7e",
}
_FLAGS = {
    "i": re.IGNORECASE,
    "c": 0,
    "g": 0,
    "n": re.MULTILINE,
    "m": re.MULTILINE,
    "s": re.DOTALL,
    "x": re.VERBOSE,
}


def _translate(pattern: str) -> str:
    """PostgreSQL ARE -> Python re for the constructs Python spells differently."""
    out = re.sub(r"\[:(\w+):\]", lambda m: _POSIX_CLASSES.get(m.group(1), m.group(0)), pattern)
    out = out.replace(r"\m", r"\b(?=\w)").replace(r"\M", r"\b(?<=\w)").replace(r"\y", r"\b")
    return out


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str, flags: str = "") -> tuple[re.Pattern[str], bool]:
    """(compiled pattern, global flag) for a PostgreSQL regex and its flag letters."""
    bits = 0
    for f in flags:
        if f not in _FLAGS:
            raise InvalidInput(f'invalid regular expression option: "{f}"', sqlstate=_INVALID_PARAMETER)
        bits = bits & ~re.IGNORECASE if f == "c" else bits | _FLAGS[f]
    try:
        return re.compile(_translate(pattern), bits), "g" in flags
    except re.error as e:
        raise InvalidInput(f"invalid regular expression: {e}", sqlstate=_REGEX_ERROR) from None


def _regexp_match(s: str, pattern: str, flags: str = "") -> list[str | None] | None:
    rx, is_global = compile_regex(pattern, flags)
    if is_global:
        raise InvalidInput(
            'regexp_match() does not support the "global" option',
            sqlstate=_INVALID_PARAMETER,
            hint="Use the regexp_matches function instead.",
        )
    m = rx.search(s)
    if m is None:
        return None
    return list(m.groups()) if rx.groups else [m.group(0)]


def _name_groups(pattern: str) -> tuple[str, int] | None:
    """The pattern with capturing groups renamed ``(?P<g1>...)``, and their count; None when it
    already has named groups or constructs better left to Python."""
    out: list[str] = []
    groups, i, n, in_class = 0, 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if pattern[i : i + 1] == "]":  # a leading ] is a literal
                out.append("]")
                i += 1
            continue
        elif ch == "(":
            if pattern[i + 1 : i + 2] == "?":
                if pattern[i + 2 : i + 3] != ":":
                    return None  # named groups, look-around, inline flags
            else:
                groups += 1
                out.append(f"(?P<g{groups}>")
                i += 1
                continue
        out.append(ch)
        i += 1
    return "".join(out), groups


def _regexp_match_vectorized(strings: pa.Array, pattern: str, flags: str) -> pa.Array | None:
    """regexp_match with Arrow's RE2 kernel; None if the pattern needs Python's engine.

    RE2 reports a group that did not take part in the match as '', PostgreSQL as NULL, so rows
    with an empty group are re-checked in Python.
    """
    compile_regex(pattern, flags)  # PostgreSQL's errors for bad patterns / flags
    if set(flags) - {"i", "c"} or "g" in flags:
        return None
    named = _name_groups(_translate(pattern))
    if named is None:
        return None
    rx, k = named
    if k == 0:
        rx, k = f"(?P<g1>{rx})", 1
    if flags.rfind("i") > flags.rfind("c"):  # the last of i / c wins
        rx = "(?i)" + rx
    try:
        found = pc.extract_regex(strings, pattern=rx)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    n = len(strings)
    fields = [found.field(j) for j in range(k)]
    flat = pa.concat_arrays(fields)
    order = (np.arange(n)[:, None] + np.arange(k)[None, :] * n).reshape(-1)
    values = flat.take(pa.array(order, pa.int64()))
    offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
    out = pa.ListArray.from_arrays(offsets, values, mask=found.is_null())
    empty = np.zeros(n, np.bool_)
    for f in fields:
        empty |= np.asarray(pc.equal(f, "").fill_null(False).to_numpy(zero_copy_only=False), np.bool_)
    if empty.any():
        rows = np.flatnonzero(empty)
        redo = per_row(
            lambda s: _regexp_match(s, pattern, flags), [strings.take(pa.array(rows))], list_of(VARCHAR)
        )
        keep = np.flatnonzero(~empty)
        out = scatter(n, [(keep, out.take(pa.array(keep))), (rows, redo)], out.type)
    return out


@register("regexp_match")
def _regexp_match_impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    pattern = constant_arg(call, 1)
    flags = constant_arg(call, 2) if len(a) > 2 else ""
    if pattern is None or flags is None:
        return pa.nulls(n, call.return_type.arrow)
    if pattern is not NOT_CONSTANT and flags is not NOT_CONSTANT:
        out = _regexp_match_vectorized(a[0], pattern, flags)
        if out is not None:
            return out
    return per_row(_regexp_match, a, call.return_type)


def _expand(template: str, m: re.Match[str]) -> str:
    """PostgreSQL replacement text: \\1..\\9 groups, \\& the whole match, \\\\ a backslash."""
    out, i = [], 0
    while i < len(template):
        ch = template[i]
        if ch == "\\" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt.isdigit() and nxt != "0":
                k = int(nxt)
                out.append((m.group(k) or "") if k <= (m.re.groups or 0) else "")
                i += 2
                continue
            if nxt == "&":
                out.append(m.group(0))
                i += 2
                continue
            if nxt == "\\":
                out.append("\\")
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _regexp_replace(s: str, pattern: str, repl: str, flags: str = "") -> str:
    rx, is_global = compile_regex(pattern, flags)
    return rx.sub(lambda m: _expand(repl, m), s, count=0 if is_global else 1)


@register("regexp_replace")
def _regexp_replace_impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return per_row(_regexp_replace, a, call.return_type)


def _regexp_count(s: str, pattern: str, start: int = 1, flags: str = "") -> int:
    if start <= 0:
        raise InvalidInput(f'invalid value for parameter "start": {start}', sqlstate=_INVALID_PARAMETER)
    rx, _ = compile_regex(pattern, flags)
    return sum(1 for _ in rx.finditer(s, start - 1))


@register("regexp_count")
def _regexp_count_impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return per_row(_regexp_count, a, call.return_type)


@register("regexp_like")
def _regexp_like_impl(call: FuncCall, a: list[pa.Array], n: int) -> pa.Array:
    return per_row(lambda s, p, f="": compile_regex(p, f)[0].search(s) is not None, a, call.return_type)
