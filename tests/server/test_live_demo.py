"""`piestream serve --demo`: the Nexmark tables fill from the connector and the MVs over them
equal their queries at every snapshot, and keep changing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from piestream.server.database import Database, DatabaseConfig
from piestream.server.live_demo import NEXMARK_MVS, start_demo, try_this

BATCH_EQUIVALENTS = {
    "bids_per_auction": "SELECT auction, count(*), max(price) FROM bid GROUP BY auction",
    "price_per_window": (
        "SELECT window_start, window_end, count(*), max(price) "
        "FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_start, window_end"
    ),
}


def _rows(s: object, sql: str) -> list[tuple[object, ...]]:
    return sorted(s.execute_one(sql).rows, key=repr)  # type: ignore[attr-defined]


def test_nexmark_demo_fills_and_its_mvs_equal_their_queries(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    db = Database(tmp_path / "d", config=DatabaseConfig(runner="local", barrier_interval=0.2, parallelism=2))
    try:
        assert start_demo(db) is None  # the connector feeds the tables: no feeder thread
        assert "hot_items" in try_this(db)
        s = db.session()
        for name in ("bids_per_auction", "price_per_window", "hot_items", "winning_bids"):
            assert name in NEXMARK_MVS and db.catalog.get(name) is not None
        counts = []
        for _ in range(2):
            time.sleep(1.5)
            s.execute("FLUSH")
            counts.append(s.execute_one("SELECT count(*) FROM bid").rows[0][0])
            for mv, query in BATCH_EQUIVALENTS.items():
                assert _rows(s, f"SELECT * FROM {mv}") == _rows(s, query)
            # hot_items: per window, the auctions with the most bids
            hot = _rows(s, "SELECT window_start, auction, bids FROM hot_items")
            best = _rows(
                s,
                "SELECT window_start, max(bids) FROM (SELECT auction, window_start, count(*) AS bids "
                "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
                "GROUP BY auction, window_start) c GROUP BY window_start",
            )
            assert hot and {w for w, _, _ in hot} == {w for w, _ in best}
            assert all(b == dict(best)[w] for w, _, b in hot)
        assert 0 < counts[0] < counts[1], counts  # fed continuously
        # person and auction share the event sequence, so bids name auctions that exist
        assert s.execute_one("SELECT count(*) FROM auction").rows[0][0] > 0
        assert s.execute_one("SELECT count(*) FROM winning_bids").rows[0][0] > 0
        # the server's console stays readable: no Arrow warning per batch
        assert "poorly aligned" not in capfd.readouterr().err
    finally:
        db.close()


def test_demo_restart_reuses_its_objects(tmp_path: Path) -> None:
    cfg = DatabaseConfig(runner="local", barrier_interval=0.2, parallelism=2)
    db = Database(tmp_path / "d", config=cfg)
    try:
        start_demo(db)
        db.session().execute("FLUSH")
        before = db.session().execute_one("SELECT count(*) FROM bid").rows[0][0]
    finally:
        db.close()
    db = Database(tmp_path / "d", config=cfg)
    try:
        start_demo(db)  # CREATE ... IF NOT EXISTS: nothing is created twice
        s = db.session()
        time.sleep(0.5)
        s.execute("FLUSH")
        assert s.execute_one("SELECT count(*) FROM bid").rows[0][0] >= before
        names = [r[0] for r in s.execute_one("SHOW MATERIALIZED VIEWS").rows]
        assert sorted(names) == sorted(set(names)) and "hot_items" in names
    finally:
        db.close()
