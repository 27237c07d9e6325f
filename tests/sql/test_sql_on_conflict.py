"""RisingWave's CREATE TABLE clauses: ON CONFLICT DO UPDATE IF NOT NULL (partial updates that
widen a row) and a trailing comma in the column list."""

from __future__ import annotations

import random

import pytest
from session_results import rows

from piestream.common.errors import PiestreamError
from piestream.server.session import Session


def test_update_if_not_null_keeps_stored_values_for_null_columns(s: Session) -> None:
    s.execute(
        "CREATE TABLE w (k int PRIMARY KEY, a int, b varchar, c double) ON CONFLICT DO UPDATE IF NOT NULL"
    )
    s.execute("CREATE MATERIALIZED VIEW mw AS SELECT * FROM w")
    s.execute("CREATE MATERIALIZED VIEW agg AS SELECT count(*) AS n, sum(a) AS sa, count(b) AS nb FROM w")
    s.execute("INSERT INTO w VALUES (1, 10, NULL, NULL)")
    # several rows of one key in one statement: each merges into the one before
    s.execute("INSERT INTO w VALUES (1, NULL, 'x', NULL), (1, NULL, NULL, 1.5), (2, NULL, 'y', NULL)")
    want = [(1, 10, "x", 1.5), (2, None, "y", None)]
    assert rows(s, "SELECT * FROM w") == want
    assert rows(s, "SELECT * FROM mw") == want
    s.execute("INSERT INTO w VALUES (1, 11, NULL, 2.5), (1, NULL, 'z', NULL), (3, 3, NULL, NULL)")
    want = [(1, 11, "z", 2.5), (2, None, "y", None), (3, 3, None, None)]
    assert rows(s, "SELECT * FROM mw") == want
    # as in RisingWave, an UPDATE merges too: it cannot set a column to NULL here
    s.execute("UPDATE w SET a = NULL, b = 'u' WHERE k = 1")
    s.execute("DELETE FROM w WHERE k = 2")
    want = [(1, 11, "u", 2.5), (3, 3, None, None)]
    assert rows(s, "SELECT * FROM w") == want
    assert rows(s, "SELECT * FROM mw") == want
    assert rows(s, "SELECT * FROM agg") == [(2, 14, 1)]


def test_update_if_not_null_against_a_model(s: Session) -> None:
    """Random partial upserts and deletes (several per statement, keys repeating) against a
    Python model of the rule; a downstream aggregate sees a consistent change stream."""
    r = random.Random(14)
    s.execute("CREATE TABLE w (k int PRIMARY KEY, a int, b varchar) ON CONFLICT DO UPDATE IF NOT NULL")
    s.execute("CREATE MATERIALIZED VIEW agg AS SELECT count(*) AS n, sum(a) AS sa, count(b) AS nb FROM w")
    model: dict[int, list[object]] = {}
    for _ in range(25):
        if r.random() < 0.2 and model:
            k = r.choice(sorted(model))
            s.execute(f"DELETE FROM w WHERE k = {k}")
            del model[k]
            continue
        values = []
        for _ in range(r.randint(1, 5)):
            k = r.randint(0, 4)
            a = r.choice([None, r.randint(0, 9)])
            b = r.choice([None, "x", "y"])
            values.append(f"({k}, {'NULL' if a is None else a}, {'NULL' if b is None else repr(b)})")
            old = model.get(k)
            # the rule: the new row's NULL columns keep the stored values
            model[k] = [a, b] if old is None else [old[0] if a is None else a, old[1] if b is None else b]
        s.execute(f"INSERT INTO w VALUES {', '.join(values)}")
        want = sorted(((k, *v) for k, v in model.items()), key=repr)
        assert rows(s, "SELECT * FROM w") == want
        n = len(model)
        avals = [int(v[0]) for v in model.values() if v[0] is not None]  # type: ignore[call-overload]
        sa = sum(avals) if avals else None
        nb = sum(v[1] is not None for v in model.values())
        assert rows(s, "SELECT * FROM agg") == [(n, sa, nb)]


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("CREATE TABLE t (a int) ON CONFLICT DO UPDATE IF NOT NULL", "42P10"),
        ("CREATE TABLE t (a int) ON CONFLICT DO NOTHING", "42P10"),
        ("CREATE TABLE t (a int PRIMARY KEY, b int) APPEND ONLY ON CONFLICT DO UPDATE IF NOT NULL", "0A000"),
    ],
)
def test_on_conflict_needs_an_updatable_primary_key(s: Session, sql: str, sqlstate: str) -> None:
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    assert info.value.sqlstate == sqlstate


def test_a_trailing_comma_in_the_column_list(s: Session) -> None:
    s.execute("CREATE TABLE t1 (a int PRIMARY KEY, b varchar,)")
    s.execute("CREATE TABLE t2 (a int, b int, PRIMARY KEY (a),)")
    s.execute("INSERT INTO t1 VALUES (1, 'x')")
    assert rows(s, "SELECT * FROM t1") == [(1, "x")]
    for bad in ("CREATE TABLE t3 (a int,,)", "CREATE TABLE t3 (,)"):
        with pytest.raises(PiestreamError) as info:
            s.execute(bad)
        assert info.value.sqlstate == "42601"
