"""Every stateful executor makes a constant number of state calls per chunk and barrier.

Each case runs one MV over tables through SQL on the in-process runner, twice: once with an
epoch of changes touching a few groups / keys and once touching 20 times as many. Every call an
executor makes on a `StateTable` (reads, scans, writes) is counted per state table; the counts of
the measured epoch must not grow with the number of groups, and stay small. The MVs are checked
against the same query run as a batch query, so the counted paths are also the correct ones.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.storage.table.state_table import StateTable

#: StateTable entry points an executor calls; nested calls (scan_prefixes -> scan_prefix_keys)
#: count once.
_COUNTED = (
    "get_row",
    "get_rows",
    "exists",
    "iter_chunks_with_prefix",
    "scan_prefixes",
    "scan_prefix_columns",
    "scan_prefix_keys",
    "insert_row",
    "delete_row",
    "update_row",
    "write_chunk",
)

_depth = threading.local()


class CallCounter:
    """Counts outermost StateTable calls per table id while `on`."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[int, str]] = Counter()
        self.on = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        @functools.wraps(fn)
        def counted(table: StateTable, *a: Any, **kw: Any) -> Any:
            depth = getattr(_depth, "n", 0)
            if counter.on and depth == 0:
                counter.calls[(table.desc.table_id, name)] += 1
            _depth.n = depth + 1
            try:
                return fn(table, *a, **kw)
            finally:
                _depth.n = depth

        return counted

    def by_method(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for (tid, name), n in sorted(self.calls.items()):
            out.setdefault(tid, {})[name] = n
        return out

    def per_table(self) -> Counter[int]:
        out: Counter[int] = Counter()
        for (tid, _), n in self.calls.items():
            out[tid] += n
        return out


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[CallCounter]:
    c = CallCounter()
    for name in _COUNTED:
        monkeypatch.setattr(StateTable, name, c.wrap(name, getattr(StateTable, name)))
    yield c


# (tables, MV query); t's and i's rows are (k, g, v, s), u's (g, w), a's (k, g, v); the tables'
# own Materialize (overwrite for t and u, ignore for i) is counted too
CASES: dict[str, tuple[list[str], str]] = {
    "hash_agg_values": (["t"], "SELECT g, count(*) AS n, sum(v) AS s, avg(v) AS a FROM t GROUP BY g"),
    "hash_agg_extreme": (["t"], "SELECT g, min(v) AS lo, max(v) AS hi FROM t GROUP BY g"),
    "hash_agg_distinct": (["t"], "SELECT g, count(DISTINCT v) AS d FROM t GROUP BY g"),
    "hash_agg_string_agg": (["t"], "SELECT g, string_agg(s, ',' ORDER BY k) AS l FROM t GROUP BY g"),
    "hash_agg_append_only": (["a"], "SELECT g, max(v) AS hi, count(*) AS n FROM a GROUP BY g"),
    "join_inner": (["t", "u"], "SELECT t.k, t.v, u.w FROM t JOIN u ON t.g = u.g"),
    "join_left": (["t", "u"], "SELECT t.k, u.w FROM t LEFT JOIN u ON t.g = u.g"),
    "join_full": (["t", "u"], "SELECT t.k, u.w FROM t FULL JOIN u ON t.g = u.g"),
    "join_semi": (["t", "u"], "SELECT t.k FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.g = t.g)"),
    "join_anti": (["t", "u"], "SELECT t.k FROM t WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.g = t.g)"),
    "top_n": (["t"], "SELECT k, v FROM t ORDER BY v, k LIMIT 3"),
    "group_top_n": (
        ["t"],
        "SELECT k, g, v FROM (SELECT k, g, v, row_number() OVER (PARTITION BY g ORDER BY v, k) AS r "
        "FROM t) x WHERE r <= 2",
    ),
    "group_top_n_append_only": (
        ["a"],
        "SELECT k, g, v FROM (SELECT k, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC, k) AS r "
        "FROM a) x WHERE r <= 2",
    ),
    "group_top_n_ties": (
        ["t"],
        "SELECT k, g, v FROM (SELECT k, g, v, rank() OVER (PARTITION BY g ORDER BY v) "
        "AS r FROM t) x WHERE r <= 1",
    ),
    "over_window": (["t"], "SELECT k, g, rank() OVER (PARTITION BY g ORDER BY v) AS r FROM t"),
    "dedup": (["a"], "SELECT DISTINCT g FROM a"),
    "materialize_ignore_conflict": (["i"], "SELECT k, v FROM i"),
    "dynamic_filter": (["t", "u"], "SELECT k, v FROM t WHERE v > (SELECT max(w) FROM u)"),
}

DDL = {
    "t": "CREATE TABLE t (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT, s VARCHAR)",
    "u": "CREATE TABLE u (g BIGINT PRIMARY KEY, w BIGINT)",
    "a": "CREATE TABLE a (k BIGINT, g BIGINT, v BIGINT) APPEND ONLY",
    "i": "CREATE TABLE i (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT, s VARCHAR) ON CONFLICT DO NOTHING",
}


def _rows(tables: list[str], lo: int, groups: int, step: int) -> list[str]:
    """INSERT statements for keys [lo, lo + 4 * groups) spread over `groups` groups."""
    keys = range(lo, lo + 4 * groups)
    out = []
    for t in tables:
        if t in ("t", "i"):
            vals = [f"({k}, {k % groups}, {(k * step) % 17}, 's{k % 5}')" for k in keys]
        elif t == "u":
            vals = [f"({g}, {(g * step) % 13})" for g in range(groups)]
        else:
            vals = [f"({k}, {k % groups}, {(k * step) % 17})" for k in keys]
        out.append(f"INSERT INTO {t} VALUES " + ", ".join(vals))
    return out


def _measure(path: Path, counter: CallCounter, tables: list[str], query: str, groups: int) -> Counter[int]:
    """State calls per table during an epoch that inserts, updates and deletes rows of `groups` groups."""
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=1, background_compaction=False)
    with Database(path, config=cfg) as db:
        s = db.session()
        for t in tables:
            s.execute(DDL[t])
        s.execute(f"CREATE MATERIALIZED VIEW mv AS {query}")
        for stmt in _rows(tables, 0, groups, 3):
            s.execute(stmt)
        s.execute("FLUSH")
        counter.calls.clear()
        counter.on = True
        # one epoch: upserts of existing keys, new keys and deletes, in every group
        for stmt in _rows(tables, 2 * groups, groups, 7):
            s.execute(stmt)
        if "t" in tables:
            s.execute(f"DELETE FROM t WHERE k < {groups}")
        s.execute("FLUSH")
        counter.on = False
        got = sorted(map(repr, s.execute_one("SELECT * FROM mv").rows))
        want = sorted(map(repr, s.execute_one(query).rows))
        assert got == want
        return counter.per_table()


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_calls_do_not_grow_with_groups(tmp_path: Path, counter: CallCounter, case: str) -> None:
    tables, query = CASES[case]
    few = _measure(tmp_path / "few", counter, tables, query, 3)
    many = _measure(tmp_path / "many", counter, tables, query, 60)
    assert few, "no state calls were counted"
    # 20x the groups: a call per group would add ~57 calls to a table; calls that depend on the
    # data (a write only when something changed) may differ by one or two
    for table, n in many.items():
        assert n <= few[table] + 2, (table, counter.by_method())
    assert max(many.values()) <= 16, dict(many)
