"""The jsonb cases the golden file holds: a table of random documents and queries over it, and
single expressions (errors among them). `make_jsonb_golden.py` runs them on a real PostgreSQL 15
and writes what it answered; test_jsonb.py runs them on piestream and compares."""

from __future__ import annotations

import json
import random
from typing import Any

KEYS = ["a", "b", "c", "é", 'k"q', "1", "", "a,b"]
STRINGS = ["x", "x\ny", 'q"t', "ü", "a,b", "{[", ":", "", "back\\slash", "a"]


def _value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth < 3 and r < 0.25:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 3 and r < 0.45:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.6:
        return rng.choice(STRINGS)
    if r < 0.75:
        return rng.choice([0, 1, -7, 12345678901234567890])
    if r < 0.82:
        return rng.choice([1.5, -0.25, 1e-3])
    return rng.choice([True, False, None])


def documents(seed: int = 32, n: int = 80) -> list[str | None]:
    rng = random.Random(seed)
    docs: list[str | None] = []
    for i in range(n):
        if i % 3 == 0:
            v: Any = {rng.choice(KEYS): _value(rng, 1) for _ in range(rng.randint(0, 5))}
        elif i % 3 == 1:
            v = [_value(rng, 1) for _ in range(rng.randint(0, 5))]
        else:
            v = _value(rng, 0)
        docs.append(json.dumps(v, ensure_ascii=False))
    docs += [None, '{"a": 1.50, "b": "1.50", "c": [1.50]}', '"a"', '["a", "b"]', "null"]
    return docs


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


TABLE = "CREATE TABLE docs (i int, d jsonb)"
CONTAINER = "jsonb_typeof(d) IN ('object', 'array')"


def table_queries() -> list[str]:
    """Queries over `docs`, each ordered by `i`."""
    exprs: list[str] = []
    for k in KEYS:
        exprs += [f"d -> {_q(k)}", f"d ->> {_q(k)}", f"d ? {_q(k)}"]
    for n in (-3, -1, 0, 1, 2, 5):
        exprs += [f"d -> {n}", f"d ->> {n}"]
    for p in [
        "{a}",
        "{a,b}",
        "{a,0}",
        "{0,a}",
        "{-1}",
        "{}",
        "{1,0,c}",
        "{0,0}",
        '{"k\\"q"}',
        "{ 1 }",
        "{x1}",
    ]:
        exprs += [f"d #> {_q(p)}", f"d #>> {_q(p)}"]
    for x in ['{"a": 1}', "[1]", "1", "{}", "[]", '"x"', '{"a": []}', "[[]]", '[{"b": true}]', "null"]:
        exprs += [f"d @> {_q(x)}", f"d <@ {_q(x)}"]
    exprs += ["d ?| '{a,b}'", "d ?& '{a,b}'", "d ?& '{}'", "d ?| ARRAY['x', 'é']"]
    for x in ['{"a": 9}', "[9]", "9", '"s"', "{}"]:
        exprs.append(f"d || {_q(x)}")
    exprs += ["d -> (ARRAY['a', 'b', 'c'])[i % 3 + 1]", "d ->> (i % 4 - 2)", "d #>> ARRAY[(i % 2)::text]"]
    exprs += ["jsonb_typeof(d)", "jsonb_strip_nulls(d)", "jsonb_extract_path_text(d, 'a', '0')"]
    exprs += ["(d -> 'a') -> 0", "d -> 'a' ->> 'b'", "(d ->> 'a') || '!'", "d -> 'a' = '1'"]
    queries = [f"SELECT i, {e} FROM docs ORDER BY i" for e in exprs]
    objects, arrays, both = "'object'", "'array'", "'object', 'array'"
    for e, kind in [
        ("d - 'a'", both),
        ("d - 1", arrays),
        ("d - -1", arrays),
        ("d - '{a,b}'::text[]", both),
        ("d #- '{0}'", arrays),
        ("d #- '{a}'", objects),
        ("d #- '{a,0}'", objects),
        ("jsonb_set(d, '{a}', '\"new\"')", objects),
        ("jsonb_set(d, '{a,0}', '\"new\"')", objects),
        ("jsonb_set(d, '{-9}', '[1]')", arrays),
        ("jsonb_set(d, '{9}', '{}', false)", arrays),
        ("jsonb_set(d, '{1}', 'null', false)", arrays),
    ]:
        queries.append(f"SELECT i, {e} FROM docs WHERE jsonb_typeof(d) IN ({kind}) ORDER BY i")
    queries.append("SELECT i, jsonb_array_length(d) FROM docs WHERE jsonb_typeof(d) = 'array' ORDER BY i")
    queries += [
        "SELECT jsonb_typeof(d) AS t, jsonb_agg(d ORDER BY i), "
        "jsonb_agg(i ORDER BY i) FILTER (WHERE i % 2 = 0), jsonb_object_agg(i, d -> 0 ORDER BY i), "
        "jsonb_agg(DISTINCT d ->> 'a' ORDER BY d ->> 'a') "
        "FROM docs GROUP BY jsonb_typeof(d) ORDER BY t",
        "SELECT jsonb_agg(d) FROM docs WHERE i < 0",
        "SELECT jsonb_object_agg(d ->> 'a', i ORDER BY i) FROM docs WHERE d ? 'a' AND d ->> 'a' IS NOT NULL",
    ]
    return queries


EXPRESSIONS = [
    "'1'::jsonb - 'a'",
    """'{"a":1}'::jsonb - 1""",
    "'1'::jsonb - 1",
    "jsonb_array_length('{}')",
    "jsonb_array_length('1')",
    "'1'::jsonb #- '{a}'",
    "jsonb_set('1', '{a}', '2')",
    """jsonb_set('{"a":[1]}', '{a,x}', '2')""",
    "'[1,2]'::jsonb #- '{x}'",
    """'{"a": 1}'::jsonb -> NULL""",
    """'{"a": 1}'::jsonb #> NULL""",
    """'{"a": {"b": 2}}'::jsonb #> ARRAY['a', NULL]""",
    """'{"a":1}'::jsonb || 'x'::text""",
    """'{"a":1}'::jsonb || '{"a": 2, "b": 3}'""",
    """'[1,2]'::jsonb || '[3]'""",
    """'"x"'::jsonb || '"y"'""",
    """'{"a": [1, {"b": null}], "c": null}'::jsonb #>> '{a,1}'""",
    """jsonb_strip_nulls('[null, {"a": null, "b": [null]}]')""",
    """jsonb_set('{"a": [1, 2]}', '{a,-1}', '9')""",
    """jsonb_set('{"a": [1, 2]}', '{a,5}', '9')""",
    """jsonb_set('{"a": [1, 2]}', '{a,-5}', '9')""",
    """jsonb_set('{"a": {"b": 1}}', '{a,c,d}', '9')""",
    """jsonb_set('{"a": 1}', '{a}', NULL)""",
    """'[1, "a", null]'::jsonb - 'a'""",
    """'[1, 2, 3]'::jsonb - -1""",
    """'["a", {"a": 1}]'::jsonb ? 'a'""",
    """jsonb_extract_path('{"a": {"b": [1, 2]}}', 'a', 'b', '-1')""",
    """jsonb_typeof('1.5')""",
    "to_jsonb(1), to_jsonb('x'::text), to_jsonb(1.50), to_jsonb(ARRAY[1, 2]), to_jsonb(true)",
    "to_jsonb('NaN'::float8), to_jsonb(2.5::float8), to_jsonb(-0.0::numeric), to_jsonb('a\"b'::text)",
    """jsonb_build_object('a', 1, 'b', 'x', 2, NULL, 'c', '{"q": 1}'::jsonb, 'a', 3)""",
    "jsonb_build_array(1, 'a', NULL, ARRAY['x', NULL]), jsonb_build_object(), jsonb_build_array()",
    "jsonb_build_object('a')",
    "jsonb_build_object(NULL, 1)",
    "to_jsonb(NULL::int), jsonb_build_object(1.5, true)",
    'x FROM jsonb_array_elements(\'[1, "a", null, [2], {"b": null}]\') AS x',
    'x FROM jsonb_array_elements_text(\'[1, "a", null, [2], "q\\""]\') AS x',
    """jsonb_object_keys('{"b": 1, "a": 2, "aa": {"c": 3}}')""",
    "jsonb_array_elements('{}')",
    "jsonb_array_elements('1')",
    "jsonb_object_keys('1')",
    "jsonb_object_keys('[]')",
    "jsonb_object_agg(NULL::text, 1)",
    """key, value FROM jsonb_each('{"b": 1, "a": [2], "c": null, "d": "s"}')""",
    """* FROM jsonb_each_text('{"b": 1, "a": [2], "c": null, "d": "s\\"q"}') AS x (k, v)""",
    "jsonb_each('[1]')",
    "* FROM jsonb_each_text('1')",
    "* FROM jsonb_each('{}') AS x (a, b, c)",
]

#: jsonpath cases: (document, path), each run through jsonb_path_query and jsonb_path_exists
JSONPATHS = [
    ('[{"a": 1}, {"a": [2]}, 3, {"b": 4}]', "$.a"),
    ('{"a": [1, 2, 3]}', "$.a[*]"),
    ('{"a": [1, 2, 3]}', "$.a[1]"),
    ('{"a": [1, 2, 3]}', "$.a[7]"),
    ('{"a": 5}', "$.a[0]"),
    ('{"a": 5}', "$.a[*]"),
    ('{"a": {"b": 1, "c": [2]}}', "$.a.*"),
    ('[{"x": 1}, [{"y": 2}], 3]', "$.*"),
    ('{"a b": {"c": null}}', '$."a b".c'),
    ('{"a": [[1, 2], [3]]}', "$.a[*][0]"),
    ('{"a": [[1, 2], [3]]}', "$.a.b"),
    ('"s"', "$"),
    ('{"a": 1}', "lax $.a"),
    ("[1, [2, [3]]]", "$[*][*]"),
]


def jsonpath_queries() -> list[str]:
    out = []
    for doc, path in JSONPATHS:
        out.append(f"jsonb_path_query({_q(doc)}, {_q(path)})")
        out.append(f"jsonb_path_exists({_q(doc)}, {_q(path)})")
    return out
