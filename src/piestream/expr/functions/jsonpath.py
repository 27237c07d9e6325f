"""A subset of SQL/JSON path (PostgreSQL's jsonpath) for jsonb_path_query / jsonb_path_exists.

Supported, in lax mode (PostgreSQL's default): ``$``, ``.key`` and ``."key"``, ``.*``, ``[n]``
(a non-negative integer) and ``[*]``. Lax mode unwraps an array one level for ``.key`` and
``.*``, reads a non-array as a one-element array for ``[n]`` and ``[*]``, and a step that finds
nothing yields nothing (no error). Anything else (strict mode, filters, ``last``, ranges,
methods, variables, arithmetic) is refused with 0A000 naming it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from piestream.common.errors import FeatureNotSupported, SyntaxError_

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<dot_star>\.\s*\*)
    | \.\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)
    | \.\s*(?P<qkey>"(?:[^"\\]|\\.)*")
    | \[\s*(?P<index>\d+)\s*\]
    | (?P<all>\[\s*\*\s*\])
    )""",
    re.VERBOSE,
)

Step = tuple[str, Any]


@lru_cache(maxsize=256)
def parse_path(text: str) -> tuple[Step, ...]:
    """The steps of a path in the supported subset; 0A000 for the rest."""
    s = text.strip()
    if re.match(r"(?i)(lax|strict)\b", s):
        mode, s = s.split(None, 1) if " " in s else (s, "")
        if mode.lower() == "strict":
            raise FeatureNotSupported("jsonpath strict mode is not supported")
        s = s.strip()
    if not s.startswith("$") or re.match(r"\$\w", s):
        raise FeatureNotSupported(f"jsonpath {text!r}: only paths from $ are supported (no variables)")
    pos = 1
    steps: list[Step] = []
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None or m.end() == pos:
            rest = s[pos:].strip()
            if not rest:
                break
            raise FeatureNotSupported(
                f"jsonpath {_construct(rest)} is not supported",
                hint='Supported: $, .key, ."key", .*, [n] and [*], in lax mode.',
            )
        if m.group("dot_star"):
            if s[m.end() :].startswith("*"):
                raise FeatureNotSupported("jsonpath the .** accessor is not supported")
            steps.append(("*", None))
        elif m.group("key") is not None:
            if s[m.end() :].lstrip().startswith("("):
                raise FeatureNotSupported(f"jsonpath method {m.group('key')}() is not supported")
            steps.append(("key", m.group("key")))
        elif m.group("qkey") is not None:
            try:
                steps.append(("key", json.loads(m.group("qkey"))))
            except ValueError:
                raise SyntaxError_(f"syntax error in jsonpath {text!r}") from None
        elif m.group("index") is not None:
            steps.append(("index", int(m.group("index"))))
        else:
            steps.append(("all", None))
        pos = m.end()
    return tuple(steps)


def _construct(rest: str) -> str:
    """A name for the first unsupported construct of a path's rest."""
    if rest.startswith("?"):
        return "filter expressions (? (...))"
    if re.match(r"\[\s*last", rest):
        return "last"
    if re.match(r"\[[^\]]*\bto\b", rest):
        return "array ranges ([a to b])"
    if re.match(r"\[[^\]]*,", rest):
        return "several subscripts ([a, b])"
    return repr(rest[:20])


def query(v: Any, steps: tuple[Step, ...]) -> list[Any]:
    """Every item the path selects from `v` (Python jsonb values), in document order."""
    items = [v]
    for kind, arg in steps:
        out: list[Any] = []
        for x in items:
            if kind == "key":
                unwrapped = x if isinstance(x, list) else [x]
                out.extend(y[arg] for y in unwrapped if isinstance(y, dict) and arg in y)
            elif kind == "*":
                for y in x if isinstance(x, list) else [x]:
                    if isinstance(y, dict):
                        out.extend(y.values())
            elif kind == "index":
                arr = x if isinstance(x, list) else [x]
                if arg < len(arr):
                    out.append(arr[arg])
            else:
                out.extend(x if isinstance(x, list) else [x])
        items = out
    return items
