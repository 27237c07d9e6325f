"""jsonb operators and functions against PostgreSQL 15's own answers (golden/jsonb_pg15.json,
written by make_jsonb_golden.py from a real server), the vectorized `->` / `#>` scan against the
per-value semantics on random documents, and MVs over a jsonb column through rounds of DML."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from jsonb_cases import EXPRESSIONS, TABLE, documents, jsonpath_queries, table_queries

from piestream.common.errors import PiestreamError
from piestream.common.text import jsonb_text, jsonb_value
from piestream.expr.functions import jsonb as J
from piestream.expr.functions.jsonb_scan import Layout
from piestream.server.session import Session

GOLDEN = Path(__file__).parent / "golden" / "jsonb_pg15.json"
_PG_TEXT_OIDS = {25: 1043}  # PostgreSQL's text is piestream's varchar


def _golden() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    lines = [json.loads(x) for x in GOLDEN.read_text().splitlines()]
    head = lines[0]
    return (
        head,
        [x["query"] for x in lines[1:] if "query" in x],
        [x["expression"] for x in lines[1:] if "expression" in x],
    )


HEAD, QUERIES, EXPRS = _golden()


def test_golden_file_matches_the_cases() -> None:
    """The golden file answers exactly today's cases (regenerate it when they change)."""
    assert HEAD["docs"] == documents()
    assert [q["sql"] for q in QUERIES] == table_queries()
    assert [e["sql"] for e in EXPRS] == [f"SELECT {e}" for e in [*EXPRESSIONS, *jsonpath_queries()]]


def _check(s: Session, case: dict[str, Any]) -> None:
    sql = case["sql"]
    if "sqlstate" in case:
        with pytest.raises(PiestreamError) as info:
            s.execute(sql)
        assert (info.value.sqlstate, str(info.value).split("\n")[0]) == (case["sqlstate"], case["message"]), (
            sql
        )
        return
    res = s.execute(sql)[-1]
    got = [list(r) for r in res.rows]
    assert got == case["rows"], f"{sql}\n" + "\n".join(
        f"  {g} != {w}" for g, w in zip(got, case["rows"], strict=False) if g != w
    )
    oids = [_PG_TEXT_OIDS.get(o, o) for o in case["oids"]]
    assert [t.pg_oid for _, t in res.columns] == oids, sql


def test_operators_over_a_table_of_documents_equal_postgresql(s: Session) -> None:
    s.execute(TABLE)
    s.execute(
        "INSERT INTO docs VALUES "
        + ", ".join(f"({i}, {'NULL' if d is None else _lit(d)})" for i, d in enumerate(HEAD["docs"]))
    )
    for case in QUERIES:
        _check(s, case)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@pytest.mark.parametrize("case", EXPRS, ids=[e["sql"][7:40] for e in EXPRS])
def test_expressions_and_errors_equal_postgresql(s: Session, case: dict[str, Any]) -> None:
    _check(s, case)


def _random_docs(rng: random.Random, n: int) -> list[str | None]:
    docs = [None if rng.random() < 0.1 else d for d in documents(rng.randrange(1 << 30), n)]
    return [None if d is None else jsonb_text(jsonb_value(d)) for d in docs]


def test_vectorized_scan_equals_the_per_value_semantics() -> None:
    """`Layout` (one numpy pass per column) against get_key / get_index / as_text on decoded values,
    over random documents with escapes, nesting and NULLs, on a sliced array too."""
    rng = random.Random(7)
    for _ in range(30):
        docs = _random_docs(rng, 60)
        arr = pa.array(["pad", *docs, "pad"], pa.string()).slice(1, len(docs))
        values = [None if d is None else jsonb_value(d) for d in docs]
        for step in ["a", "b", 'k"q', "é", "", "1", "a,b", 0, 1, -1, 3]:
            lay = Layout(arr)
            s = lay.index(step, scalars=True) if isinstance(step, int) else lay.key(step)
            get = J.element if isinstance(step, int) else J.get_key
            want = [J._MISSING if d is None else get(v, step) for d, v in zip(docs, values, strict=True)]
            want_json = [None if w is J._MISSING else jsonb_text(w) for w in want]
            want_text = [None if w is J._MISSING else J.as_text(w) for w in want]
            assert lay.gather(s).to_pylist() == want_json, step
            assert lay.as_text(s).to_pylist() == want_text, step


def test_scan_of_empty_and_all_null_columns() -> None:
    for arr in (pa.array([], pa.string()), pa.array([None, None], pa.string())):
        lay = Layout(arr)
        assert lay.gather(lay.key("a")).to_pylist() == [None] * len(arr)
        assert lay.as_text(lay.index(0)).to_pylist() == [None] * len(arr)
    lay = Layout(pa.array(['{"a": 1}', "[]", '"s"', "{}"]))
    assert lay.gather(lay.key("a")).to_pylist() == ["1", None, None, None]
    assert np.array_equal(lay.index(-1).rows, np.zeros(0))


def test_containment_and_existence_laws() -> None:
    """a @> a; a || b contains b (and a, for arrays); a key `?` finds is contained with its value."""
    rng = random.Random(3)
    docs = [jsonb_value(d) for d in _random_docs(rng, 200) if d is not None]
    for a in docs:
        assert J.contains(a, a)
        b = rng.choice(docs)
        if isinstance(a, dict) and isinstance(b, dict):
            assert J.contains(J.concat(a, b), b)
        if isinstance(a, list) and isinstance(b, list):
            both = J.concat(a, b)
            assert J.contains(both, a) and J.contains(both, b)
        if isinstance(a, dict):
            for k in a:
                assert J.exists(a, k) and J.contains(a, {k: a[k]})


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("strict $.a", "strict mode"),
        ("$ ? (@.a > 1)", "filter expressions"),
        ("$.a[last]", "last"),
        ("$.a[1 to 2]", "array ranges"),
        ("$.a[1, 2]", "several subscripts"),
        ("$.a.size()", "method size()"),
        ("$.**", ".**"),
        ("$var", "only paths from $"),
    ],
)
def test_jsonpath_outside_the_subset_is_refused_naming_it(s: Session, path: str, named: str) -> None:
    for fn in ("jsonb_path_query", "jsonb_path_exists"):
        with pytest.raises(PiestreamError) as info:
            s.execute(f"""SELECT {fn}('{{"a": [1]}}', {_lit(path)})""")
        assert info.value.sqlstate == "0A000" and named in str(info.value), (fn, path, info.value)


def test_refused_forms_name_themselves(s: Session) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute("""SELECT '{"a": 1}'::jsonb @? '$.a'""")
    assert info.value.sqlstate == "0A000" and "@?" in str(info.value)
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT ARRAY[1, 2] @> ARRAY[1]")
    assert info.value.sqlstate == "0A000" and "array containment (@>)" in str(info.value)


def _model_row(i: int, doc: str | None) -> tuple[Any, ...]:
    """The expected row of MV `acc`, from the per-value semantics."""
    if doc is None:
        return (i, None, None, None, None, None)
    v = jsonb_value(doc)
    b = J.get_key(v, "b")
    return (
        i,
        J.as_text(J.get_key(v, "a")),
        None if b is J._MISSING else jsonb_text(b),
        J.as_text(J.get_path(v, ["c", "0"])),
        J.exists(v, "a"),
        J.contains(v, {"k": Decimal(1)}),
    )


def _doc(rng: random.Random) -> str | None:
    if rng.random() < 0.1:
        return None
    v: dict[str, Any] = {}
    if rng.random() < 0.7:
        v["a"] = rng.choice(["x", 'q"t', 1, None, [1], {"z": 2}])
    if rng.random() < 0.5:
        v["b"] = rng.choice([True, "s", [1, {"y": None}]])
    if rng.random() < 0.5:
        v["c"] = rng.choice([[7, 8], ["é"], [], {"0": "key"}])
    v["k"] = rng.randint(0, 3)
    if rng.random() < 0.1:
        return json.dumps([v])
    return json.dumps(v, ensure_ascii=False)


def test_mvs_over_a_jsonb_column_equal_their_queries_through_dml(s: Session) -> None:
    """Projections, a filter, a grouping, jsonb_agg / jsonb_object_agg and jsonb_each /
    jsonb_array_elements_text in FROM, kept up to date through
    rounds of random INSERT / UPDATE / DELETE: each MV equals its query each round, and `acc` the
    per-value model."""
    rng = random.Random(32)
    s.execute("CREATE TABLE t (id int PRIMARY KEY, doc jsonb)")
    mvs = {
        "acc": "SELECT id, doc ->> 'a' AS a, doc -> 'b' AS b, doc #>> '{c,0}' AS c0, doc ? 'a' AS has_a, "
        """doc @> '{"k": 1}' AS k1 FROM t""",
        "flt": """SELECT id, doc -> 'c' -> -1 AS last FROM t WHERE doc @> '{"k": 2}' OR doc ->> 'a' = 'x'""",
        "grp": "SELECT doc ->> 'k' AS k, count(*) AS n, count(doc -> 'a') AS with_a "
        "FROM t GROUP BY doc ->> 'k'",
        "agg": "SELECT doc ->> 'k' AS k, jsonb_agg(doc -> 'a' ORDER BY id) AS a, "
        "jsonb_object_agg(id, doc -> 'b') AS b, jsonb_agg(id ORDER BY id) FILTER (WHERE doc ? 'c') AS c "
        "FROM t GROUP BY doc ->> 'k'",
        "each": "SELECT id, e.key, e.value, x FROM t CROSS JOIN "
        "jsonb_each(CASE WHEN jsonb_typeof(doc) = 'object' THEN doc ELSE '{}' END) AS e "
        "CROSS JOIN jsonb_array_elements_text(CASE WHEN jsonb_typeof(doc -> 'c') = 'array' "
        "THEN doc -> 'c' ELSE '[]' END) AS x",
    }
    for name, q in mvs.items():
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    table: dict[int, str | None] = {}
    for _ in range(6):
        stmts = []
        for _ in range(12):
            i = rng.randrange(40)
            doc = _doc(rng)
            lit = "NULL" if doc is None else _lit(doc)
            if i not in table:
                stmts.append(f"INSERT INTO t VALUES ({i}, {lit})")
                table[i] = doc
            elif rng.random() < 0.6:
                stmts.append(f"UPDATE t SET doc = {lit} WHERE id = {i}")
                table[i] = doc
            else:
                stmts.append(f"DELETE FROM t WHERE id = {i}")
                del table[i]
        for stmt in stmts:
            s.execute(stmt)
        for name, q in mvs.items():
            got = sorted(map(tuple, s.execute(f"SELECT * FROM {name}")[-1].rows), key=repr)
            assert got == sorted(map(tuple, s.execute(q)[-1].rows), key=repr), name
        want = sorted((_model_row(i, d) for i, d in table.items()), key=repr)
        assert sorted(map(tuple, s.execute("SELECT * FROM acc")[-1].rows), key=repr) == want


def test_long_columns_are_scanned_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A column longer than SCAN_ROWS is scanned block by block, with the same answer, escapes
    (the substring path and the json path) included."""
    docs = _random_docs(random.Random(11), 300)
    tricky = ['x"y', 'tab\tq"z', "b\\s", "\x01"]
    docs += [jsonb_text({"a": v}) for v in tricky]
    arr = pa.array(docs, pa.string())
    whole = [J._extract(arr, [k], True, operator=True).to_pylist() for k in ("a", 0)]
    monkeypatch.setattr(J, "SCAN_ROWS", 7)
    assert [J._extract(arr, [k], True, operator=True).to_pylist() for k in ("a", 0)] == whole
    want = [J.as_text(J.get_key(jsonb_value(d), "a")) if d is not None else None for d in docs]
    assert whole[0] == want
    assert whole[0][-4:] == tricky


def test_a_bad_document_in_a_streaming_srf_is_an_error_record(s: Session) -> None:
    """jsonb_each over an array: batch fails with PostgreSQL's 22023; an MV skips the row and
    records the error (its epoch commits, later rows keep flowing)."""
    s.execute("CREATE TABLE t (id int PRIMARY KEY, d jsonb)")
    s.execute(
        "CREATE MATERIALIZED VIEW m AS SELECT id, k, v FROM t CROSS JOIN jsonb_each_text(t.d) AS x (k, v)"
    )
    s.execute("""INSERT INTO t VALUES (1, '{"x": 1, "y": "s"}'), (2, '[1]'), (3, NULL)""")
    s.execute("""INSERT INTO t VALUES (4, '{"z": null}')""")
    assert sorted(s.execute("SELECT * FROM m")[-1].rows) == [(1, "x", "1"), (1, "y", "s"), (4, "z", None)]
    errors = s.execute("SELECT error_message, sample_row FROM rw_catalog.rw_streaming_errors")[-1].rows
    assert [e[0] for e in errors] == ["cannot call jsonb_each_text on a non-object"]
    assert "[1]" in str(errors[0][1])
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT * FROM t CROSS JOIN jsonb_each_text(t.d)")
    assert (info.value.sqlstate, str(info.value)) == ("22023", "cannot call jsonb_each_text on a non-object")


def test_a_where_on_the_input_filters_before_the_srf(s: Session) -> None:
    """A WHERE on the table's columns filters before the set-returning function runs, as in
    PostgreSQL: the documents it removes never reach jsonb_each, in a query (no 22023) or in an
    MV (no error record)."""
    s.execute("CREATE TABLE t (id int PRIMARY KEY, d jsonb)")
    q = (
        "SELECT id, k, v FROM t CROSS JOIN jsonb_each_text(t.d) AS x (k, v) "
        "WHERE jsonb_typeof(t.d) = 'object' AND id > 0"
    )
    s.execute(f"CREATE MATERIALIZED VIEW m AS {q}")
    s.execute("""INSERT INTO t VALUES (1, '{"x": 1}'), (2, '[1]'), (3, '"s"'), (-4, '[2]')""")
    assert s.execute("SELECT * FROM m")[-1].rows == [(1, "x", "1")]
    assert s.execute(q)[-1].rows == [(1, "x", "1")]
    assert s.execute("SELECT count(*) FROM rw_catalog.rw_streaming_errors")[-1].rows == [(0,)]
