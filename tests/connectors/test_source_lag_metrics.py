"""Source lag in /metrics (issue 31), RisingWave's series for Kafka partitions:
``source_kafka_high_watermark`` and ``source_latest_message_id`` (lag = their difference - 1,
the Grafana panel's expression). It moves with the work: messages produced while the source is
paused raise it by their count; once the source reads again, epochs bring it back to 0. CDC
tables: ``source_cdc_lag_bytes`` / ``source_cdc_lag_seconds`` (what rw_cdc_sources shows) rise
with upstream writes a paused table has not applied and fall once it applies them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kafka_broker import Broker, kafka, local_db
from nexmark_sql import wait_until
from pg_server import PgServer
from prometheus_client.parser import text_string_to_metric_families

from piestream.server.dashboard.metrics import MetricsEndpoint
from piestream.server.database import Database, DatabaseConfig

CFG = DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)

__all__ = ["kafka"]


GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "piestream.json"


def _grafana_covered(endpoint: MetricsEndpoint, prefix: str) -> None:
    """The Grafana dashboard's series starting with `prefix` are in a scrape, with samples."""
    exprs = [t["expr"] for p in json.loads(GRAFANA.read_text())["panels"] for t in p["targets"]]
    wanted = {m for e in exprs for m in re.findall(rf"\b({prefix}[a-z_]*)\b", e)}
    scraped = {f.name for f in text_string_to_metric_families(endpoint.scrape().decode()) if f.samples}
    assert wanted and wanted <= scraped, wanted - scraped


def _lags(endpoint: MetricsEndpoint) -> dict[str, float]:
    """partition -> high watermark - latest message id - 1, from one scrape."""
    values: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(endpoint.scrape().decode()):
        if fam.name in ("source_kafka_high_watermark", "source_latest_message_id"):
            for s in fam.samples:
                assert s.labels["source_name"] == "lagged"
                values.setdefault(s.labels["partition"], {})[fam.name] = s.value
    return {
        p: v["source_kafka_high_watermark"] - v["source_latest_message_id"] - 1
        for p, v in sorted(values.items())
    }


def test_kafka_lag_rises_with_produced_messages_and_falls_as_epochs_read_them(
    kafka: Broker, tmp_path: Path
) -> None:
    kafka.create_topic("lagged", 2)
    kafka.produce("lagged", [{"v": i} for i in range(10)], partition=[i % 2 for i in range(10)])
    db = local_db(tmp_path / "db")
    try:
        endpoint = MetricsEndpoint(db)
        db.execute(f"CREATE TABLE lagged (v INT) {kafka.with_clause('lagged')} FORMAT PLAIN ENCODE JSON")
        wait_until(lambda: db.execute("SELECT count(*) FROM lagged")[0].rows[0][0] == 10, what="10 rows")
        assert _lags(endpoint) == {"0": 0, "1": 0}
        _grafana_covered(endpoint, "source_(?:kafka|latest)_")

        db.execute("ALTER TABLE lagged SET source_rate_limit = 0")  # paused: the messages wait
        # one message per batch: the test broker (Tansu) reports the high watermark as the last
        # batch's first offset + 1, which is the real one only for batches of one
        kafka.produce(
            "lagged", [{"v": i} for i in range(30)], partition=[0] * 20 + [1] * 10, one_per_batch=True
        )
        db.execute("FLUSH")
        wait_until(lambda: _lags(endpoint) == {"0": 20, "1": 10}, what="lag of the produced messages")

        db.execute("ALTER TABLE lagged SET source_rate_limit = DEFAULT")
        wait_until(lambda: _lags(endpoint) == {"0": 0, "1": 0}, what="lag back to 0")
        assert db.execute("SELECT count(*) FROM lagged")[0].rows[0][0] == 40
    finally:
        db.close()


def _cdc_lag(endpoint: MetricsEndpoint) -> tuple[float | None, float | None]:
    """(lag bytes, lag seconds) of CDC table `watched`, from one scrape."""
    got: dict[str, float] = {}
    for fam in text_string_to_metric_families(endpoint.scrape().decode()):
        if fam.name in ("source_cdc_lag_bytes", "source_cdc_lag_seconds"):
            for s in fam.samples:
                if s.labels["table_name"] == "watched":
                    got[fam.name] = s.value
    return got.get("source_cdc_lag_bytes"), got.get("source_cdc_lag_seconds")


def test_cdc_lag_rises_with_upstream_writes_and_falls_as_epochs_apply_them(
    pg: PgServer, tmp_path: Path
) -> None:
    pg.sql("CREATE TABLE watched (id int PRIMARY KEY, v text)")
    pg.sql("INSERT INTO watched VALUES (1, 'a')")
    db = Database(tmp_path / "db", config=CFG)
    try:
        endpoint = MetricsEndpoint(db)
        opts = pg.with_options(table_name="watched", slot_name="lagged_slot", publication_name="lagged_pub")
        db.execute(f"CREATE TABLE watched (id int PRIMARY KEY, v varchar) WITH ({opts})")
        count = "SELECT count(*) FROM watched"
        wait_until(lambda: db.execute(count)[0].rows[0][0] == 1, what="the snapshot")
        pg.sql("INSERT INTO watched VALUES (2, 'b')")
        wait_until(lambda: db.execute(count)[0].rows[0][0] == 2, what="streaming")
        caught_up, _ = _cdc_lag(endpoint)
        assert caught_up is not None
        _grafana_covered(endpoint, "source_cdc_")

        db.execute("ALTER TABLE watched SET source_rate_limit = 0")  # paused: the WAL waits
        pg.sql("INSERT INTO watched SELECT g, repeat('x', 100) FROM generate_series(3, 2002) g")
        db.execute("FLUSH")
        paused, seconds = _cdc_lag(endpoint)
        assert paused is not None and paused > caught_up + 2000 * 100  # the rows' WAL at least
        assert seconds is not None and seconds > 0

        db.execute("ALTER TABLE watched SET source_rate_limit = DEFAULT")
        wait_until(lambda: db.execute(count)[0].rows[0][0] == 2002, what="the rows applied")
        wait_until(lambda: (_cdc_lag(endpoint)[0] or 0) < paused - 2000 * 100, what="the lag fallen")
        db.execute("DROP TABLE watched")  # and its slot upstream
    finally:
        db.close()
