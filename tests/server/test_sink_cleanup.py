"""Sinks leave nothing behind and lose nothing when a publish or a CREATE SINK fails (psycopg).

* A publish that fails without a crash (here the Delta log is moved away for a few epochs) is
  retried after the next commit. The epochs committed meanwhile, whose staged files the sink
  state no longer names, reach the lake table too, once each, and no staged file is left.
* A CREATE SINK whose first epoch fails (strict mode, a division by zero in the backfill) fails
  with the cause's SQLSTATE and leaves no catalog entry, staging directory, output directory or
  lake table (Delta directory, Iceberg catalog row) behind: the same statement with other
  columns then succeeds.
* DROP SINK deletes the sink's staged output.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from piestream.server.pgwire import PgServer


def _wait(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _delta_rows(location: Path) -> Counter[tuple[Any, ...]]:
    from deltalake import DeltaTable

    return Counter(tuple(r.values()) for r in DeltaTable(str(location)).to_pyarrow_table().to_pylist())


def _staging_dirs(server: PgServer, sink: str) -> list[Path]:
    root = Path(server.database.data_dir) / "sink_staging"
    return sorted(root.glob(f"{sink}-*")) if root.exists() else []


def _staged_files(server: PgServer, sink: str) -> list[str]:
    return [str(p) for d in _staging_dirs(server, sink) for p in d.rglob("*") if p.is_file()]


def test_a_failed_publish_is_retried_and_loses_no_epoch(server: PgServer, dsn: str, tmp_path: Path) -> None:
    location = tmp_path / "d_pub"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE pub (k INT, v INT)")
        c.execute(
            f"CREATE SINK pub_sink FROM pub WITH (connector = 'delta', location = '{location}', "
            "type = 'append-only', force_append_only = 'true')"
        )
        want: Counter[tuple[Any, ...]] = Counter()

        def insert(base: int) -> None:  # 40 rows: every actor stages output in this epoch
            rows = [(base + i, base) for i in range(40)]
            c.execute("INSERT INTO pub VALUES " + ", ".join(f"({k}, {v})" for k, v in rows))
            c.execute("FLUSH")
            want.update(rows)

        insert(100)
        _wait(lambda: _delta_rows(location) == want, "the first epoch in the Delta table")
        log = location / "_delta_log"
        log.rename(location / "_delta_log.away")  # every publish fails now, the server goes on
        try:
            for base in (200, 300, 400):  # later epochs overwrite the state's names per actor
                insert(base)
            assert _staged_files(server, "pub_sink"), "the unpublished epochs stay staged"
        finally:
            (location / "_delta_log.away").rename(log)
        insert(500)
        _wait(lambda: _delta_rows(location) == want, "every epoch in the Delta table")
        assert max(_delta_rows(location).values()) == 1  # none written twice
        _wait(lambda: not _staged_files(server, "pub_sink"), "the staged files to be cleaned up")
        # DROP SINK takes its staging directory; the published table stays
        assert _staging_dirs(server, "pub_sink")
        c.execute("DROP SINK pub_sink")
        assert not _staging_dirs(server, "pub_sink")
        assert _delta_rows(location) == want
        c.execute("DROP TABLE pub")


@pytest.mark.parametrize("connector", ["delta", "iceberg", "parquet"])
def test_create_sink_whose_first_epoch_fails_leaves_nothing(
    server: PgServer, dsn: str, tmp_path: Path, connector: str
) -> None:
    target = tmp_path / f"out_{connector}"
    with_options = {
        "delta": f"connector = 'delta', location = '{target}'",
        "iceberg": f"connector = 'iceberg', warehouse.path = '{target}', database.name = 'db', "
        "table.name = 'bad'",
        "parquet": f"connector = 'parquet', path = '{target}'",
    }[connector]
    name = f"bad_{connector}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE src_{connector} (x INT)")
        c.execute(f"INSERT INTO src_{connector} VALUES (5), (0)")
        c.execute("FLUSH")
        c.execute("ALTER SYSTEM SET streaming_strict_mode = true")
        try:
            with pytest.raises(psycopg.Error) as info:
                c.execute(
                    f"CREATE SINK {name} AS SELECT 10 / x AS r FROM src_{connector} "
                    f"WITH ({with_options}, type = 'append-only', force_append_only = 'true')"
                )
            assert info.value.sqlstate == "22012"
        finally:
            c.execute("ALTER SYSTEM SET streaming_strict_mode = false")
        assert name not in {r[0] for r in c.execute("SHOW SINKS").fetchall()}
        assert not _staging_dirs(server, name)
        if connector == "iceberg":  # the table's catalog row is gone (its files too)
            from pyiceberg.catalog.sql import SqlCatalog

            cat = SqlCatalog(
                "piestream", uri=f"sqlite:///{target / 'piestream_catalog.db'}", warehouse=f"file://{target}"
            )
            assert not cat.table_exists("db.bad")
            assert not cat.namespace_exists("db")  # the sink made it: gone with its table
        else:
            assert not target.exists()
        # the same sink with other columns works now (an old lake table would refuse them)
        c.execute(
            f"CREATE SINK {name} AS SELECT x, x + 1 AS y FROM src_{connector} "
            f"WITH ({with_options}, type = 'append-only', force_append_only = 'true')"
        )
        c.execute(f"DROP SINK {name}")
        c.execute(f"DROP TABLE src_{connector}")
    assert not os.path.exists(target / "_staging")
