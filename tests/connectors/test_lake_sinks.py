"""Delta Lake and Iceberg sinks: the target tables, read back with deltalake and pyiceberg, equal
the sunk relations after random DML, after a retried publish, and after a SIGKILL in the middle
of a lake commit (before it, and after it but before the clean-up)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lake_workload import SETUP, delta_epochs, delta_rows, sinks, sources, statement, targets

from piestream.common.errors import PiestreamError
from piestream.connectors.delta import DeltaSinkTable, create_delta_table
from piestream.connectors.lakehouse import publish_lake
from piestream.server.database import Database, DatabaseConfig

CHILD = Path(__file__).parent / "lake_crash_child.py"
CFG = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2)


def wait_equal(db: Database, lake: Path, timeout: float = 30.0) -> None:
    """The publisher commits right after each epoch: poll until every target equals its relation."""
    s = db.session()
    deadline = time.monotonic() + timeout
    while True:
        want = sources(lambda q: s.execute_one(q).rows)
        got = targets(lake)
        if got == want:
            return
        if time.monotonic() > deadline:
            diff = {k: (got[k] - want[k], want[k] - got[k]) for k in want if got[k] != want[k]}
            raise AssertionError(f"lake targets differ from piestream (extra, missing): {diff}")
        time.sleep(0.1)


def test_lake_sinks_equal_the_relations_after_random_dml(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with Database(tmp_path / "d", config=CFG) as db:
        s = db.session()
        for sql in SETUP + sinks(lake):
            s.execute(sql)
        rng = random.Random(7)
        for i in range(30):
            s.execute(statement(rng, i))
        wait_equal(db, lake)
        assert sum(targets(lake)["t"].values()) > 5 and sum(targets(lake)["ev"].values()) > 2
        epochs = delta_epochs(lake / "d_agg")
        assert len(epochs) == len(set(epochs)) > 5  # one commit per epoch, none twice
        # the schemas carry the SQL types
        from deltalake import DeltaTable

        assert [str(f.type) for f in DeltaTable(str(lake / "d_t")).schema().fields] == [
            'PrimitiveType("integer")',
            'PrimitiveType("integer")',
            'PrimitiveType("string")',
        ]
        s.execute("DROP SINK d_t")
        s.execute("INSERT INTO t VALUES (1000, 1, 'after drop')")
        time.sleep(0.3)
        assert (1000, 1, "after drop") not in delta_rows(lake / "d_t")


def test_sink_option_errors(tmp_path: Path) -> None:
    with Database(tmp_path / "d", config=CFG) as db:
        s = db.session()
        s.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        s.execute("CREATE TABLE other (a varchar) APPEND ONLY")
        x = tmp_path / "x"
        s.execute(
            f"CREATE SINK o FROM other WITH (connector = 'delta', location = '{x}', type = 'append-only')"
        )
        cases = {
            "CREATE SINK e FROM t WITH (connector = 'delta')": "22023",
            "CREATE SINK e FROM t WITH (connector = 'iceberg', warehouse.path = '/tmp/w')": "22023",
            "CREATE SINK e FROM t WITH (connector = 'iceberg', catalog.type = 'rest', warehouse.path = 'w', "
            "database.name = 'd', table.name = 't')": "0A000",
            # an existing table with other columns
            f"CREATE SINK e FROM t WITH (connector = 'delta', location = '{x}', type = 'upsert')": "22023",
        }
        for sql, state in cases.items():
            with pytest.raises(PiestreamError) as info:
                s.execute(sql)
            assert info.value.sqlstate == state, sql
        assert db.catalog.get("e") is None


def _staged(tmp_path: Path, epoch: int, rows: list[tuple[int, int, str]]) -> tuple[str, str]:
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    name = f"{epoch:020d}-0000-abc.parquet"
    k, v, op = zip(*rows, strict=True)
    table = pa.table({"k": pa.array(k, pa.int32()), "v": pa.array(v, pa.int32()), "_op": list(op)})
    pq.write_table(table, staging / name)
    return str(staging), name


def test_a_retried_publish_writes_an_epoch_once(tmp_path: Path) -> None:
    location = str(tmp_path / "delta")
    create_delta_table(location, pa.schema([("k", pa.int32()), ("v", pa.int32())]))
    target = DeltaSinkTable(location, "s", "upsert", ("k",))
    staging, name = _staged(tmp_path, 100, [(1, 10, "upsert"), (2, 20, "upsert")])
    # the driver died after the lake commit, before deleting the staged file
    target.commit(100, pq.read_table(os.path.join(staging, name)))
    assert publish_lake(target, staging, 100, [(0, 100, name, 2)]) == 0  # recorded: not again
    assert not os.listdir(staging)  # cleaned up
    staging, name = _staged(tmp_path, 200, [(1, 0, "delete"), (3, 30, "upsert")])
    state = [(0, 200, name, 2)]
    assert publish_lake(target, staging, 150, state) == 0  # epoch 200 is not committed yet
    assert publish_lake(target, staging, 200, state) == 1
    assert publish_lake(target, staging, 200, state) == 0
    assert delta_rows(Path(location)) == {(2, 20): 1, (3, 30): 1}
    assert target.last_epoch() == 200


def _run_child(data: Path, lake: Path, mode: str, kill_at: int, seed: int) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(data), str(lake), mode, str(kill_at), str(seed)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("mode", ["before", "after"])
def test_sigkill_in_the_middle_of_a_lake_commit(tmp_path: Path, mode: str) -> None:
    data, lake = tmp_path / "d", tmp_path / "lake"
    with Database(data, config=CFG) as db:
        s = db.session()
        for sql in SETUP + sinks(lake):
            s.execute(sql)
    events = _run_child(data, lake, mode, kill_at=6, seed=11)
    killed = [e for e in events if e.get("event") == "killing"]
    assert killed and killed[0]["mode"] == mode, events[-3:]
    epoch = killed[0]["epoch"]
    recorded: Callable[[], bool] = lambda: epoch in delta_epochs(lake / killed[0]["location"])  # noqa: E731
    assert recorded() == (mode == "after")
    with Database(data, config=CFG) as db:  # reopening publishes what the crash left staged
        wait_equal(db, lake)
        assert recorded()
        for name in ("d_agg", "d_t", "d_ev"):
            epochs = delta_epochs(lake / name)
            assert len(epochs) == len(set(epochs)), name  # no epoch written twice


def test_removing_a_created_iceberg_table_drops_only_a_namespace_it_created(tmp_path: Path) -> None:
    """A failed CREATE SINK removes the table it made, and the namespace only if it made that too
    and nothing else lives there by now."""
    from pyiceberg.catalog.sql import SqlCatalog

    from piestream.connectors.iceberg import create_iceberg_table

    opts = {
        "catalog.uri": f"sqlite:///{tmp_path / 'cat.db'}",
        "warehouse.path": f"file://{tmp_path}",
        "database.name": "db",
        "table.name": "t",
    }
    schema = pa.schema([("x", pa.int32())])
    cat = SqlCatalog("piestream", uri=opts["catalog.uri"], warehouse=opts["warehouse.path"])
    remove = create_iceberg_table(opts, schema)
    assert remove is not None and cat.table_exists("db.t")
    assert create_iceberg_table(opts, schema) is None  # it exists now: nothing to remove later
    remove()
    assert not cat.table_exists("db.t") and not cat.namespace_exists("db")
    # a namespace that was there before stays
    cat.create_namespace("keep")
    remove = create_iceberg_table({**opts, "database.name": "keep"}, schema)
    assert remove is not None
    remove()
    assert cat.namespace_exists("keep") and not cat.table_exists("keep.t")
    # a namespace this call made, where another table was created meanwhile, stays with it
    remove = create_iceberg_table(opts, schema)
    assert remove is not None
    cat.create_table("db.other", schema=schema)
    remove()
    assert cat.namespace_exists("db") and cat.table_exists("db.other") and not cat.table_exists("db.t")
