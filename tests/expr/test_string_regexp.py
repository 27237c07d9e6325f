"""String functions, LIKE / ILIKE and the regexp functions."""

from __future__ import annotations

from decimal import Decimal

import pytest
from expr_helpers import Col, fails, one, run

from piestream.common.types import BYTEA, INT, VARCHAR

S = VARCHAR


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        ("lower", ["AbC É"], "abc é"),
        ("upper", ["abc é"], "ABC É"),
        ("length", ["héllo"], 5),
        ("char_length", [""], 0),
        ("octet_length", ["héllo"], 6),
        ("substr", ["hello", 2], "ello"),
        ("substr", ["hello", 2, 3], "ell"),
        ("substr", ["hello", 0, 2], "h"),
        ("substr", ["hello", -5, 3], ""),
        ("substr", ["hello", 4, 100], "lo"),
        ("substring", ["héllo", 2, 2], "él"),
        ("trim", ["  a b  "], "a b"),
        ("btrim", ["xyaxy", "xy"], "a"),
        ("ltrim", ["  a  "], "a  "),
        ("rtrim", ["xxaxx", "x"], "xxa"),
        ("concat", ["a", None, 1, Decimal("2.50"), True], "a12.50true"),  # 2.50 keeps its scale
        ("concat", [None], ""),
        ("concat_ws", ["-", "a", None, "b", 3], "a-b-3"),
        ("concat_ws", [None, "a"], None),
        ("||", ["a", "b"], "ab"),
        ("||", ["n=", 5], "n=5"),
        ("||", [None, "b"], None),
        ("split_part", ["a/b/c", "/", 2], "b"),
        ("split_part", ["a/b/c", "/", 4], ""),
        ("split_part", ["a/b/c", "/", -1], "c"),
        ("split_part", ["a/b/c", "/", -4], ""),
        ("split_part", ["abc", "", 1], "abc"),
        ("split_part", ["", "/", 1], ""),
        ("split_part", ["a//b", "//", 2], "b"),
        ("replace", ["abcabc", "b", "XY"], "aXYcaXYc"),
        ("replace", ["abc", "", "X"], "abc"),
        ("position", ["héllo", "l"], 3),
        ("strpos", ["hello", "z"], 0),
        ("strpos", ["hello", ""], 1),
        ("left", ["hello", 2], "he"),
        ("left", ["hello", -2], "hel"),
        ("left", ["hello", 0], ""),
        ("right", ["hello", 2], "lo"),
        ("right", ["hello", -2], "llo"),
        ("right", ["hi", 5], "hi"),
        ("reverse", ["héllo"], "olléh"),
        ("repeat", ["ab", 3], "ababab"),
        ("repeat", ["ab", -1], ""),
        ("lpad", ["hi", 5], "   hi"),
        ("lpad", ["hi", 5, "xy"], "xyxhi"),
        ("lpad", ["hello", 2], "he"),
        ("rpad", ["hi", 5, "xy"], "hixyx"),
        ("rpad", ["hi", 4, ""], "hi"),
        ("lpad", ["hi", -1], ""),
        ("starts_with", ["hello", "he"], True),
        ("starts_with", ["hello", "lo"], False),
        ("initcap", ["hi THOMAS o'neil 1abc"], "Hi Thomas O'Neil 1abc"),
        ("md5", ["abc"], "900150983cd24fb0d6963f7d28e17f72"),
        ("ascii", ["A"], 65),
        ("chr", [233], "é"),
        ("lower", [None], None),
        ("substr", ["hello", None], None),
    ],
)
def test_string_functions(fn: str, args: list, expected: object) -> None:
    assert one(fn, *args) == expected


def test_string_functions_with_column_arguments() -> None:
    s = Col(["hello", "héllo", None, "ab"], S)
    k = Col([2, 1, 3, None], INT)
    assert run("substr", s, k) == ["ello", "héllo", None, None]
    assert run("substr", s, k, Col([2, 1, 1, 1], INT)) == ["el", "h", None, None]
    assert run("left", s, k) == ["he", "h", None, None]
    assert run("right", s, k) == ["lo", "o", None, None]
    assert run("lpad", s, Col([7, 6, 1, 3], INT), "*") == ["**hello", "*héllo", None, "*ab"]
    assert run("split_part", Col(["a,b", "c;d"], S), Col([",", ";"], S), 2) == ["b", "d"]
    assert run("replace", Col(["aa", "bb"], S), Col(["a", "b"], S), "z") == ["zz", "zz"]
    assert run("strpos", Col(["abc", "xyz"], S), Col(["c", "q"], S)) == [3, 0]
    assert run("btrim", Col(["xax", "yby"], S), Col(["x", "y"], S)) == ["a", "b"]
    assert run("starts_with", Col(["abc", "xbc"], S), Col(["a", "a"], S)) == [True, False]
    assert run("repeat", Col(["a", "b"], S), Col([2, 0], INT)) == ["aa", ""]
    assert run("concat", s, k) == ["hello2", "héllo1", "3", "ab"]
    assert run("length", Col([b"\x00\x01", None], BYTEA)) == [2, None]
    assert run("md5", Col([b"abc"], BYTEA)) == ["900150983cd24fb0d6963f7d28e17f72"]


def test_string_errors() -> None:
    fails("22011", one, "substr", "hello", 1, -1, match="negative substring length not allowed")
    fails("22023", one, "split_part", "a/b", "/", 0, match="field position must not be zero")
    fails("22023", run, "split_part", Col(["a"], S), Col(["/"], S), 0)
    fails("54000", one, "chr", 0)


@pytest.mark.parametrize(
    ("op", "s", "pattern", "expected"),
    [
        ("like", "abc", "abc", True),
        ("like", "abc", "a%", True),
        ("like", "abc", "_b_", True),
        ("like", "abc", "_b", False),
        ("like", "a%c", "a\\%c", True),
        ("like", "abc", "a\\%c", False),
        ("like", "a_c", "a\\_c", True),
        ("like", "a\\c", "a\\\\c", True),
        ("like", "ABC", "abc", False),
        ("like", "é", "_", True),
        ("like", "a\nb", "a%b", True),
        ("ilike", "ABC", "a%", True),
        ("ilike", "ÉCOLE", "é%", True),
        ("not_like", "abc", "a%", False),
        ("not_ilike", "ABC", "x%", True),
        ("like", None, "a%", None),
        ("like", "", "", True),
        ("like", "x", "", False),
        ("like", "", "%", True),
        ("like", "abc", "%%", True),
        ("like", "abc", "ab", False),
        ("like", "xabcx", "%bc%", True),
        ("like", "abc", "%bc", True),
        ("like", "abc", "%b", False),
        ("ilike", "ABC", "abc", True),
        ("ilike", "xABCx", "%bc%", True),
        ("ilike", "ABC", "%C", True),
        ("like", "a%", "%\\%", True),
        ("like", "abc", None, None),
    ],
)
def test_like(op: str, s: object, pattern: object, expected: object) -> None:
    assert one(op, s, pattern) == expected


def test_like_column_patterns_and_errors() -> None:
    assert run("like", Col(["abc", "xyz", "a"], S), Col(["a%", "%z", None], S)) == [True, True, None]
    assert run("ilike", Col(["ABC"], S), Col(["a_c"], S)) == [True]
    fails("22025", one, "like", "abc", "ab\\", match="must not end with escape character")
    fails("22025", run, "like", Col(["abc"], S), Col(["ab\\"], S))


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        ("regexp_match", ["foobarbequebaz", "(bar)(beque)"], ["bar", "beque"]),
        ("regexp_match", ["foobarbequebaz", "bar"], ["bar"]),
        ("regexp_match", ["abc", "x"], None),
        ("regexp_match", ["ABC", "b", "i"], ["B"]),
        ("regexp_match", ["ab", "(x)?b"], [None]),
        ("regexp_match", ["a1b", "[[:digit:]]"], ["1"]),
        ("regexp_match", ["https://x.com/?a=1&channel_id=42&z=3", "(&|^)channel_id=([^&]*)"], ["&", "42"]),
        ("regexp_replace", ["foobarbaz", "b..", "X"], "fooXbaz"),
        ("regexp_replace", ["foobarbaz", "b..", "X", "g"], "fooXX"),
        ("regexp_replace", ["foobarbaz", "b(..)", "X\\1Y", "g"], "fooXarYXazY"),
        ("regexp_replace", ["abc", "b", "[\\&]"], "a[b]c"),
        ("regexp_replace", ["ABC", "b", "x", "gi"], "AxC"),
        ("regexp_replace", ["a.b", "\\.", "\\\\"], "a\\b"),
        ("regexp_count", ["abcabc", "b"], 2),
        ("regexp_count", ["abcabc", "b", 3], 1),
        ("regexp_count", ["ABab", "a", 1, "i"], 2),
        ("regexp_like", ["abc", "^a"], True),
        ("regexp_match", [None, "a"], None),
    ],
)
def test_regexp(fn: str, args: list, expected: object) -> None:
    assert one(fn, *args) == expected


def test_regexp_errors() -> None:
    fails("2201B", one, "regexp_match", "a", "(", match="invalid regular expression")
    fails("22023", one, "regexp_match", "a", "a", "g", match="global")
    fails("22023", one, "regexp_replace", "a", "a", "b", "z", match='invalid regular expression option: "z"')


def test_nexmark_q21_and_q22_shapes() -> None:
    from expr_helpers import bind, evaluate

    from piestream.expr import InputRef, bind_call, literal

    urls = Col(
        ["https://www.nexmark.com/a/b/c/item.htm?query=1&channel_id=1234", "https://x.com/p/q", None], S
    )
    _, chunk = bind("is_null", urls)
    url = InputRef(0, VARCHAR)
    m = bind_call("regexp_match", [url, literal("(&|^)channel_id=([^&]*)")])
    assert evaluate(bind_call("array_access", [m, literal(2)]), chunk) == ["1234", None, None]
    parts = [evaluate(bind_call("split_part", [url, literal("/"), literal(i)]), chunk) for i in (4, 5, 6)]
    assert parts == [["a", "p", None], ["b", "q", None], ["c", "", None]]
    lower = bind_call("lower", [url])
    assert evaluate(bind_call("in", [lower, literal("apple"), literal("google")]), chunk) == [
        False,
        False,
        None,
    ]


REGEX_CASES = [
    ("(&|^)channel_id=([^&]*)", ""),
    ("(a)?b(c*)", ""),
    ("[]a]+(x|y)?", ""),
    ("(?:ab)+(c)", ""),
    ("B(.)", "i"),
    ("b", "ic"),
    ("[[:digit:]]+", ""),
    ("\\d(\\w)", ""),
    ("(?=a)a", ""),  # look-ahead: Python's engine
    ("((a)|b)+", ""),
]


@pytest.mark.parametrize(("pattern", "flags"), REGEX_CASES)
def test_regexp_match_vectorized_agrees_with_per_row(pattern: str, flags: str) -> None:
    import random

    from piestream.expr.functions.regexp import _regexp_match

    rng = random.Random(7)
    values = [
        None
        if rng.random() < 0.1
        else "".join(rng.choice("abcBC&=x1_]channel_id") for _ in range(rng.randint(0, 12)))
        for _ in range(300)
    ]
    values += ["channel_id=5", "q=1&channel_id=", "b", "ab", "abccc", "]]ax"]
    col = Col(values, S)
    got = run("regexp_match", col, pattern, flags) if flags else run("regexp_match", col, pattern)
    assert got == [None if v is None else _regexp_match(v, pattern, flags) for v in values]
