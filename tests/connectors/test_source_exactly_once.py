"""Sources resume exactly: through SQL on the local runner, a Nexmark table and an MV over it,
interrupted by a clean restart or a SIGKILL of the process running it, end up holding exactly
the events [0, N) — no duplicates, no gaps — and so does an append-only Parquet sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

from nexmark_sql import BID_COLUMNS, bid_table, expected_bids, wait_until

from piestream.connectors.sinks import read_sink
from piestream.server.database import Database, DatabaseConfig

N = 10_000
MV = f"CREATE MATERIALIZED VIEW bids AS SELECT {BID_COLUMNS} FROM bid WHERE price > 0"
AGG = "CREATE MATERIALIZED VIEW stats AS SELECT count(*) AS c, sum(price) AS s FROM bid"


def _config() -> DatabaseConfig:
    return DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)


def _count(db: Database, rel: str = "bid") -> int:
    return int(db.execute(f"SELECT count(*) FROM {rel}")[0].rows[0][0])


def _check_done(db: Database, want: list[tuple]) -> None:
    wait_until(lambda: _count(db, "bids") >= len(want), what="all bids in the MV")
    assert sorted(db.execute(f"SELECT {BID_COLUMNS} FROM bids")[0].rows) == want
    assert sorted(db.execute(f"SELECT {BID_COLUMNS} FROM bid")[0].rows) == want
    c, s = db.execute("SELECT c, s FROM stats")[0].rows[0]
    assert (c, s) == (len(want), sum(r[2] for r in want))


def test_restart_resumes_from_committed_offsets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    want = expected_bids(N)
    db = Database(tmp_path / "db", config=_config())
    # 1 ms between events (10 s for all of them): a loaded machine polling slowly still stops
    # the database mid-way (at 0.2 ms the whole source was once read before the close)
    db.execute(bid_table(N, gap_ns=1_000_000))
    db.execute(MV)
    db.execute(AGG)
    wait_until(lambda: _count(db, "bids") > 1000, what="some progress")
    db.close()
    db = Database(tmp_path / "db", config=_config())
    try:
        n = _count(db, "bids")
        assert 0 < n < len(want)  # resumed mid-way
        _check_done(db, want)
    finally:
        db.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from piestream.server.database import Database, DatabaseConfig
    db = Database(sys.argv[1], config=DatabaseConfig(runner="local", barrier_interval=0.05,
                                                     background_compaction=False))
    for stmt in sys.argv[2:]:
        db.execute(stmt)
    while True:
        print(db.execute("SELECT count(*) FROM bid")[0].rows[0][0], flush=True)
        time.sleep(0.02)
    """
)


def test_sigkill_mid_stream_loses_and_duplicates_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    want = expected_bids(N)
    sink = tmp_path / "sink"
    stmts = [
        bid_table(N, gap_ns=1_000_000),  # 2k events/s: ~5 s to finish, killed after ~1 s
        MV,
        AGG,
        f"CREATE SINK out AS SELECT {BID_COLUMNS} FROM bid WITH (connector = 'parquet', path = '{sink}')",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "db"), *stmts],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line) > 1500:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    db = Database(tmp_path / "db", config=_config())
    try:
        assert _count(db) < len(want)  # killed mid-way
        _check_done(db, want)
        wait_until(lambda: len(read_sink(str(sink))) >= len(want), what="the sink to catch up")
        t = read_sink(str(sink))
        assert sorted(zip(*(t.column(c).to_pylist() for c in BID_COLUMNS.split(", ")), strict=True)) == want
        parts = [n for n in os.listdir(sink) if n.startswith("part-")]
        assert len(parts) == len(set(parts)) and not Counter(p[:30] for p in parts).most_common(1)[0][1] > 2
    finally:
        db.close()
