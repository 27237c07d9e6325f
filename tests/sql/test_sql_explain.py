"""Planner golden tests: EXPLAIN CREATE MATERIALIZED VIEW for the main shapes, checked as structured
facts (stream keys, exchanges, state tables' pk / order / distribution) rather than as whole text.

The facts follow reference §6-7: HashAgg keyed by its group key with a result table on it; a
hash join's state tables keyed by join key ++ input stream key and distributed by the join key;
TopN in one actor with a state table ordered by the ORDER BY then the stream key; GroupTopN by
group ++ order ++ stream key, distributed by the group; UNION ALL's stream key made of the
branches' keys plus the branch index; the MV pk = ORDER BY columns first, then the stream key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from piestream.server.session import Session


@dataclass
class Op:
    depth: int
    name: str
    detail: str
    stream_key: list[str]


@dataclass
class Table:
    columns: list[str]
    pk: list[str]  # "col ASC" / "col DESC"
    dist: list[str]


@dataclass
class Explain:
    mv_stream_key: list[str]
    ops: list[Op]  # the stream plan (before fragmentation)
    fragments: int
    tables: list[Table]

    def ops_named(self, name: str) -> list[Op]:
        return [o for o in self.ops if o.name == name]

    def tables_with(self, *columns: str) -> list[Table]:
        return [t for t in self.tables if all(c in t.columns for c in columns)]


_OP = re.compile(r"^(\s*)└─(\w+)(?: (\{.*?\}))? \{ stream_key: \[(.*?)\] \}$")
_TABLE = re.compile(r"^Table \d+ \{ columns: \[(.*?)\], pk: \[(.*?)\], dist: \[(.*?)\], prefix: \d+ \}$")


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def explain(s: Session, query: str) -> Explain:
    lines = [r[0] for r in s.execute(f"EXPLAIN CREATE MATERIALIZED VIEW m AS {query}")[0].rows]
    head = re.match(r"^StreamMaterialize \{ stream_key: \[(.*?)\] \}$", lines[0])
    assert head, lines[0]
    ops: list[Op] = []
    tables: list[Table] = []
    fragments = 0
    section = "plan"
    for line in lines[1:]:
        if line.startswith("Fragment "):
            section = "fragments"
            fragments += 1
        m = _TABLE.match(line)
        if m:
            tables.append(Table(_list(m.group(1)), _list(m.group(2)), _list(m.group(3))))
            continue
        m = _OP.match(line)
        if m and section == "plan":
            ops.append(Op(len(m.group(1)) // 2, m.group(2), m.group(3) or "", _list(m.group(4))))
    return Explain(_list(head.group(1)), ops, fragments, tables)


@pytest.fixture
def ex(s: Session) -> Session:
    s.execute(
        "CREATE TABLE t (k INT PRIMARY KEY, v BIGINT, name VARCHAR);"
        "CREATE TABLE u (a INT, b VARCHAR);"
        "CREATE TABLE ao (id INT, x INT) APPEND ONLY;"
    )
    return s


def mv_table(e: Explain, columns: list[str]) -> Table:
    """The MV's own table: the root fragment's, listed first; its visible columns lead."""
    t = e.tables[0]
    assert t.columns[: len(columns)] == columns, e.tables
    return t


def test_hash_agg(ex: Session) -> None:
    e = explain(ex, "SELECT name, count(*) AS c, max(v) AS mx FROM t GROUP BY name")
    assert e.mv_stream_key == ["name"]
    assert mv_table(e, ["name", "c", "mx"]) == Table(["name", "c", "mx"], ["name ASC"], ["name"])
    (agg,) = e.ops_named("HashAgg")
    assert agg.stream_key == ["name"]
    # the input is shuffled by the group key
    below = e.ops[e.ops.index(agg) + 1]
    assert below.name == "Exchange" and "HashShard($0)" in below.detail
    # result state keyed by the group; max over a retractable input keeps its inputs ordered
    (result,) = e.tables_with("_g0", "_row_count")
    assert result.pk == ["_g0 ASC"] and result.dist == ["_g0"]
    (minput,) = [t for t in e.tables if t.columns[0] == "_g0" and "_row_count" not in t.columns]
    assert minput.pk[:2] == ["_g0 ASC", "_a0 DESC"] and minput.dist == ["_g0"]


def test_append_only_agg_keeps_max_as_a_value(ex: Session) -> None:
    e = explain(ex, "SELECT id, max(x) AS mx FROM ao GROUP BY id")
    assert e.mv_stream_key == ["id"]
    (result,) = e.tables_with("_g0", "_row_count")
    assert any(c.startswith("_max") for c in result.columns)
    assert not [t for t in e.tables if t.columns[0] == "_g0" and t is not result]


def test_simple_agg_is_a_singleton(ex: Session) -> None:
    e = explain(ex, "SELECT count(*) AS c, sum(v) AS s FROM t")
    assert e.mv_stream_key == []
    (agg,) = e.ops_named("SimpleAgg")
    assert e.ops[e.ops.index(agg) + 1].detail == "{ dist: Single }"
    assert mv_table(e, ["c", "s"]).pk == []


def test_hash_join(ex: Session) -> None:
    e = explain(ex, "SELECT t.name, u.b FROM t JOIN u ON t.k = u.a")
    (join,) = e.ops_named("HashJoin")
    assert "inner" in join.detail
    assert join.stream_key == ["k", "_row_id"]  # left key ++ right key (the join key is k)
    assert len(e.mv_stream_key) == 2
    mv = mv_table(e, ["name", "b"])
    assert len(mv.pk) == 2 and mv.dist == [p.split()[0] for p in mv.pk]
    left = [t for t in e.tables if t.columns == ["k", "name"]]
    right = [t for t in e.tables if t.columns == ["a", "b", "_row_id"]]
    assert left == [Table(["k", "name"], ["k ASC"], ["k"])]
    assert right == [Table(["a", "b", "_row_id"], ["a ASC", "_row_id ASC"], ["a"])]
    degrees = e.tables_with("_degree")
    assert sorted(d.dist[0] for d in degrees) == ["a", "k"]


def test_left_join_keeps_both_keys(ex: Session) -> None:
    e = explain(ex, "SELECT u.b, t.name FROM u LEFT JOIN t ON u.a = t.k")
    (join,) = e.ops_named("HashJoin")
    assert "left_outer" in join.detail
    assert join.stream_key[:2] == ["_row_id", "k"] and "a" in join.stream_key


def test_top_n(ex: Session) -> None:
    e = explain(ex, "SELECT k, v FROM t ORDER BY v DESC LIMIT 3")
    (top,) = e.ops_named("TopN")
    assert "limit: 3" in top.detail and top.stream_key == ["k"]
    assert e.ops[e.ops.index(top) + 1].detail == "{ dist: Single }"
    state = [t for t in e.tables if t.columns == ["k", "v"] and t.dist == ["singleton"]]
    assert state and state[0].pk == ["v DESC", "k ASC"]
    assert e.mv_stream_key == ["k"]
    assert mv_table(e, ["k", "v"]).pk == ["v DESC", "k ASC"]  # ORDER BY first (reference §7)


def test_group_top_n(ex: Session) -> None:
    e = explain(
        ex,
        "SELECT k, name, v FROM (SELECT k, name, v, ROW_NUMBER() OVER (PARTITION BY name ORDER BY v) AS rn "
        "FROM t) s WHERE rn <= 2",
    )
    (top,) = e.ops_named("GroupTopN")
    assert "group_key: [name]" in top.detail and "limit: 2" in top.detail
    assert top.stream_key == ["name", "k"]  # group key ++ input key
    below = e.ops[e.ops.index(top) + 1]
    assert below.name == "Exchange" and "HashShard" in below.detail
    (state,) = [t for t in e.tables if t.pk == ["name ASC", "v ASC", "k ASC"]]
    assert state.dist == ["name"]


def test_union_all(ex: Session) -> None:
    e = explain(ex, "SELECT k AS id FROM t UNION ALL SELECT a FROM u")
    (union,) = e.ops_named("Union")
    assert union.stream_key[-1] == "_union_branch"
    assert e.mv_stream_key == union.stream_key
    mv = mv_table(e, ["id"])
    assert [p.split()[0] for p in mv.pk] == union.stream_key


def test_mv_pk_is_order_by_then_stream_key(ex: Session) -> None:
    """Reference §7's example: ORDER BY i, with stream key id, gives pk [i, id], dist [id]."""
    e = explain(ex, "SELECT k, v FROM t ORDER BY v")
    assert e.mv_stream_key == ["k"]
    assert mv_table(e, ["k", "v"]) == Table(["k", "v"], ["v ASC", "k ASC"], ["k"])


def test_project_keeps_dropped_key_hidden(ex: Session) -> None:
    e = explain(ex, "SELECT name FROM t")
    assert len(e.mv_stream_key) == 1 and e.mv_stream_key[0].endswith("k")
    mv = mv_table(e, ["name"])
    assert mv.columns[0] == "name" and mv.columns[1].endswith("k") and mv.pk == [f"{mv.columns[1]} ASC"]
