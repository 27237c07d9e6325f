"""Shared pieces of the lakehouse sink tests: the schema, a seeded random DML workload, and
readers of the Delta / Iceberg targets (through deltalake and pyiceberg themselves)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

SETUP = [
    "CREATE TABLE t (k int PRIMARY KEY, v int, s varchar)",
    "CREATE TABLE ev (id int, note varchar) APPEND ONLY",
    "CREATE MATERIALIZED VIEW agg AS SELECT v % 5 AS g, count(*) AS n, sum(k) AS total, max(s) AS top "
    "FROM t GROUP BY v % 5",
]


def sinks(lake: Path) -> list[str]:
    wh = f"warehouse.path = '{lake / 'wh'}', database.name = 'db'"
    return [
        f"CREATE SINK d_agg FROM agg WITH (connector = 'delta', location = '{lake / 'd_agg'}', "
        "type = 'upsert')",
        f"CREATE SINK d_t FROM t WITH (connector = 'delta', location = '{lake / 'd_t'}', type = 'upsert')",
        f"CREATE SINK d_ev FROM ev WITH (connector = 'delta', location = '{lake / 'd_ev'}')",
        f"CREATE SINK i_agg FROM agg WITH (connector = 'iceberg', {wh}, table.name = 'agg', type = 'upsert')",
        f"CREATE SINK i_ev FROM ev WITH (connector = 'iceberg', {wh}, table.name = 'ev')",
    ]


def statement(rng: random.Random, i: int) -> str:
    """One random DML statement (statement i of the run)."""
    r = rng.random()
    k = rng.randrange(40)
    if r < 0.45:
        rows = ", ".join(
            f"({rng.randrange(40)}, {rng.randrange(100)}, 's{rng.randrange(9)}')" for _ in range(3)
        )
        return f"INSERT INTO t VALUES {rows}"
    if r < 0.65:
        return f"UPDATE t SET v = v + {rng.randrange(1, 7)}, s = 'u{i % 7}' WHERE k % 7 = {k % 7}"
    if r < 0.8:
        return f"DELETE FROM t WHERE k % 9 = {k % 9}"
    return f"INSERT INTO ev VALUES ({i}, 'n{k}'), ({i}, NULL)"


def delta_rows(path: Path) -> Counter[tuple[Any, ...]]:
    from deltalake import DeltaTable

    return Counter(tuple(r.values()) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def iceberg_rows(lake: Path, table: str) -> Counter[tuple[Any, ...]]:
    from pyiceberg.catalog.sql import SqlCatalog

    wh = lake / "wh"
    cat = SqlCatalog("piestream", uri=f"sqlite:///{wh / 'piestream_catalog.db'}", warehouse=f"file://{wh}")
    return Counter(tuple(r.values()) for r in cat.load_table(f"db.{table}").scan().to_arrow().to_pylist())


def delta_epochs(path: Path) -> list[int]:
    """The sink epochs recorded in the Delta log, one per commit that wrote them."""
    from deltalake import DeltaTable

    return [int(h["piestream.epoch"]) for h in DeltaTable(str(path)).history() if "piestream.epoch" in h]


def targets(lake: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    return {
        "agg": delta_rows(lake / "d_agg"),
        "t": delta_rows(lake / "d_t"),
        "ev": delta_rows(lake / "d_ev"),
        "i_agg": iceberg_rows(lake, "agg"),
        "i_ev": iceberg_rows(lake, "ev"),
    }


def sources(rows_of: Any) -> dict[str, Counter[tuple[Any, ...]]]:
    """What each target must hold: the relation it sinks, read from piestream."""
    agg = Counter(map(tuple, rows_of("SELECT g, n, total, top FROM agg")))
    ev = Counter(map(tuple, rows_of("SELECT id, note FROM ev")))
    t = Counter(map(tuple, rows_of("SELECT k, v, s FROM t")))
    return {"agg": agg, "t": t, "ev": ev, "i_agg": agg, "i_ev": ev}
