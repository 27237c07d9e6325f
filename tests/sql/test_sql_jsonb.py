"""jsonb operators and functions against PostgreSQL 15's own answers (golden/jsonb_pg15.json,
written by make_jsonb_golden.py from a real server), the vectorized `->` / `#>` scan against the
per-value semantics on random documents, and MVs over a jsonb column through rounds of DML."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from jsonb_cases import EXPRESSIONS, TABLE, documents, table_queries

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
    assert [e["sql"] for e in EXPRS] == [f"SELECT {e}" for e in EXPRESSIONS]


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


def test_refused_forms_name_themselves(s: Session) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute("""SELECT '{"a": 1}'::jsonb @? '$.a'""")
    assert info.value.sqlstate == "0A000" and "@?" in str(info.value)
    with pytest.raises(PiestreamError) as info:
        s.execute("SELECT ARRAY[1, 2] @> ARRAY[1]")
    assert info.value.sqlstate == "0A000" and "array containment (@>)" in str(info.value)
