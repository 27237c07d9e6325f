"""The Nexmark queries on Spark's own operators, over the same events, for `piestream bench`.

The events are generated once by piestream's generator and written to Parquet (one directory
per table, one file per `file_events` events, so a micro-batch of ``maxFilesPerTrigger = 1``
reads what a piestream epoch reads). Each query is Spark SQL over temporary views ``bid``,
``auction`` and ``person``:

- ``stream``: the views are streaming DataFrames (``readStream.parquet``); the query runs as a
  Structured Streaming query with ``trigger(availableNow=True)`` into the ``noop`` sink — only
  for the shapes Spark streaming runs incrementally (projections, filters, stream-stream inner
  joins without watermarks, one aggregation in update mode);
- ``recompute``: everything else (aggregations feeding joins or aggregations, ROW_NUMBER,
  DISTINCT aggregates, subqueries): a batch job over all the events computes the query from
  scratch into ``noop``, which is what keeping its result fresh costs Spark per refresh.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.generator import EventKind, event_kinds, generate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KINDS = {"person": EventKind.PERSON, "auction": EventKind.AUCTION, "bid": EventKind.BID}

_BANDS = ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000")


def _band_aggs(distinct_cols: Sequence[str]) -> str:
    parts = ["count(*) AS total_bids"]
    parts += [f"count(*) FILTER (WHERE {b}) AS rank{i}_bids" for i, b in enumerate(_BANDS, 1)]
    for c in distinct_cols:
        parts.append(f"count(DISTINCT {c}) AS total_{c}s")
        parts += [f"count(DISTINCT {c}) FILTER (WHERE {b}) AS rank{i}_{c}s" for i, b in enumerate(_BANDS, 1)]
    return ", ".join(parts)


_DAY = "date_format(date_time, 'yyyy-MM-dd')"
_JOIN_VALID = "A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires"


@dataclass(frozen=True)
class SparkQuery:
    """Spark SQL for one query and how Spark runs it."""

    sql: str
    mode: str  # "stream" | "recompute"
    output_mode: str = "append"  # for streams


SPARK_QUERIES: dict[str, SparkQuery] = {
    "q0": SparkQuery("SELECT auction, bidder, price, date_time FROM bid", "stream"),
    "q1": SparkQuery("SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid", "stream"),
    "q2": SparkQuery(
        "SELECT auction, price FROM bid WHERE auction IN (1007, 1020, 2001, 2019, 2087)", "stream"
    ),
    "q3": SparkQuery(
        "SELECT P.name, P.city, P.state, A.id FROM auction A JOIN person P ON A.seller = P.id "
        "WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')",
        "stream",
    ),
    "q4": SparkQuery(
        "SELECT category, avg(final) AS avg FROM (SELECT max(B.price) AS final, A.category "
        f"FROM auction A JOIN bid B ON {_JOIN_VALID} GROUP BY A.id, A.category) GROUP BY category",
        "recompute",
    ),
    "q5": SparkQuery(
        """SELECT AB.auction, AB.num FROM (
            SELECT auction, count(*) AS num, window.start AS starttime FROM bid
            GROUP BY auction, window(date_time, '10 seconds', '2 seconds')) AB
        JOIN (
            SELECT max(num) AS maxn, starttime_c FROM (
                SELECT count(*) AS num, window.start AS starttime_c FROM bid
                GROUP BY auction, window(date_time, '10 seconds', '2 seconds'))
            GROUP BY starttime_c) MB
        ON AB.starttime = MB.starttime_c AND AB.num >= MB.maxn""",
        "recompute",
    ),
    "q6": SparkQuery(
        """SELECT seller, avg(final) OVER (PARTITION BY seller ORDER BY date_time
                ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
        FROM (SELECT ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price) AS rank,
                A.seller, B.price AS final, B.date_time
              FROM auction A JOIN bid B ON """
        + _JOIN_VALID
        + ") WHERE rank <= 1",
        "recompute",
    ),
    "q7": SparkQuery(
        """SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B
        JOIN (SELECT max(price) AS maxprice, window.end AS date_time FROM bid
              GROUP BY window(date_time, '10 seconds')) B1
        ON B.price = B1.maxprice
        WHERE B.date_time BETWEEN B1.date_time - INTERVAL 10 SECONDS AND B1.date_time""",
        "recompute",
    ),
    "q8": SparkQuery(
        """SELECT P.id, P.name, P.starttime FROM (
            SELECT id, name, window.start AS starttime, window.end AS endtime FROM person
            GROUP BY id, name, window(date_time, '10 seconds')) P
        JOIN (
            SELECT seller, window.start AS starttime, window.end AS endtime FROM auction
            GROUP BY seller, window(date_time, '10 seconds')) A
        ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
        "recompute",
    ),
    "q9": SparkQuery(
        """SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category,
            auction, bidder, price, bid_date_time FROM (
            SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
                ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
            FROM auction A JOIN bid B ON """
        + _JOIN_VALID
        + ") WHERE rownum <= 1",
        "recompute",
    ),
    "q10": SparkQuery(
        "SELECT auction, bidder, price, date_time, date_format(date_time, 'yyyy-MM-dd') AS date, "
        "date_format(date_time, 'hh:mm') AS time FROM bid",
        "stream",
    ),
    "q14": SparkQuery(
        """SELECT auction, bidder, 0.908 * price AS price,
            CASE WHEN hour(date_time) >= 8 AND hour(date_time) <= 18 THEN 'dayTime'
                 WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime'
                 ELSE 'otherTime' END AS bidTimeType,
            date_time, length(extra) - length(replace(extra, 'c', '')) AS c_counts
        FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
        "stream",
    ),
    "q15": SparkQuery(
        f"SELECT {_DAY} AS day, {_band_aggs(('bidder', 'auction'))} FROM bid GROUP BY {_DAY}", "recompute"
    ),
    "q16": SparkQuery(
        f"SELECT channel, {_DAY} AS day, max(date_format(date_time, 'HH:mm')) AS minute, "
        f"{_band_aggs(('bidder', 'auction'))} FROM bid GROUP BY channel, {_DAY}",
        "recompute",
    ),
    "q17": SparkQuery(
        f"SELECT auction, {_DAY} AS day, {_band_aggs(())}, min(price) AS min_price, "
        f"max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price "
        f"FROM bid GROUP BY auction, {_DAY}",
        "stream",
        "update",
    ),
    "q18": SparkQuery(
        """SELECT auction, bidder, price, channel, url, date_time, extra FROM (
            SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, extra)
                AS rank_number FROM bid) WHERE rank_number <= 1""",
        "recompute",
    ),
    "q19": SparkQuery(
        """SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC)
            AS rank_number FROM bid) WHERE rank_number <= 10""",
        "recompute",
    ),
    "q20": SparkQuery(
        """SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time, B.extra AS bid_extra,
            item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, expires, seller,
            category, A.extra AS auction_extra
        FROM bid B JOIN auction A ON B.auction = A.id WHERE A.category = 10""",
        "stream",
    ),
    "q21": SparkQuery(
        """SELECT auction, bidder, price, channel,
            CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
                 WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
                 ELSE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id
        FROM bid
        WHERE url RLIKE '(&|^)channel_id=' OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
        "stream",
    ),
    "q22": SparkQuery(
        "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
        "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
        "stream",
    ),
    "q101": SparkQuery(
        """SELECT a.id AS auction_id, a.item_name AS auction_item_name, b.max_price AS current_highest_bid
        FROM auction a LEFT JOIN (SELECT auction, max(price) AS max_price FROM bid GROUP BY auction) b
        ON a.id = b.auction""",
        "recompute",
    ),
    "q102": SparkQuery(
        """SELECT a.id AS auction_id, a.item_name AS auction_item_name, count(b.auction) AS bid_count
        FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.item_name
        HAVING count(b.auction) >= (SELECT count(*) DIV count(DISTINCT auction) FROM bid)""",
        "recompute",
    ),
    "q103": SparkQuery(
        """SELECT a.id AS auction_id, a.item_name AS auction_item_name FROM auction a
        WHERE a.id IN (SELECT auction FROM bid GROUP BY auction HAVING count(*) >= 20)""",
        "recompute",
    ),
    "q104": SparkQuery(
        """SELECT a.id AS auction_id, a.item_name AS auction_item_name FROM auction a
        WHERE a.id NOT IN (SELECT auction FROM bid GROUP BY auction HAVING count(*) < 20)""",
        "recompute",
    ),
    "q105": SparkQuery(
        """SELECT a.id AS auction_id, a.item_name AS auction_item_name, count(b.auction) AS bid_count
        FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.item_name
        ORDER BY bid_count DESC LIMIT 1000""",
        "recompute",
    ),
    "q106": SparkQuery(
        f"""SELECT min(final) AS min_final FROM (
            SELECT A.id, max(B.price) AS final FROM auction A JOIN bid B ON {_JOIN_VALID} GROUP BY A.id)""",
        "recompute",
    ),
}


# -- the events as Parquet --------------------------------------------------------------------------


def event_table(cfg: NexmarkConfig, table: str, lo: int, hi: int) -> pa.Table:
    """The rows of `table` among events [lo, hi), timestamps marked UTC (Spark's TIMESTAMP)."""
    n = np.arange(lo, hi, dtype=np.int64)
    kind = KINDS[table]
    b = generate(cfg, kind, n[event_kinds(cfg, n) == kind])
    t = pa.Table.from_batches([b])
    fields = [
        pa.field(f.name, pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
        for f in t.schema
    ]
    return t.cast(pa.schema(fields))


def write_events(
    root: Path, events: int, file_events: int, tables: Sequence[str] = ("person", "auction", "bid")
) -> dict[str, Path]:
    """Write events [0, `events`) as Parquet, one directory per table, `file_events` per file."""
    cfg = NexmarkConfig()
    dirs = {}
    for t in tables:
        d = root / t
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        dirs[t] = d
    for lo in range(0, events, file_events):
        hi = min(events, lo + file_events)
        for t in tables:
            pq.write_table(event_table(cfg, t, lo, hi), dirs[t] / f"part-{lo:012d}.parquet")
    return dirs


# -- running ----------------------------------------------------------------------------------------


@dataclass
class SparkRun:
    mode: str
    seconds: float
    batches: int = 0


@contextmanager
def utc_session(spark: SparkSession) -> Iterator[None]:
    """Spark SQL's session time zone set to UTC (the generator's event times) for the duration."""
    old = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


def run_spark_query(
    spark: SparkSession, name: str, dirs: dict[str, Path], workdir: Path, tables: Sequence[str]
) -> SparkRun:
    """Run query `name` on Spark over the Parquet events (streaming or a full recompute)."""
    q = SPARK_QUERIES[name]
    with utc_session(spark):
        schemas = {t: spark.read.parquet(str(dirs[t])).schema for t in tables}
        try:
            if q.mode == "stream":
                for t in tables:
                    df = (
                        spark.readStream.schema(schemas[t])
                        .option("maxFilesPerTrigger", 1)
                        .parquet(str(dirs[t]))
                    )
                    df.createOrReplaceTempView(t)
                ckpt = workdir / f"spark-ckpt-{name}"
                shutil.rmtree(ckpt, ignore_errors=True)
                started = time.perf_counter()
                sq = (
                    spark.sql(q.sql)
                    .writeStream.format("noop")
                    .outputMode(q.output_mode)
                    .option("checkpointLocation", str(ckpt))
                    .trigger(availableNow=True)
                    .start()
                )
                sq.awaitTermination()
                seconds = time.perf_counter() - started
                batches = len({p["batchId"] for p in sq.recentProgress})
                shutil.rmtree(ckpt, ignore_errors=True)
                return SparkRun("stream", seconds, batches)
            for t in tables:
                spark.read.parquet(str(dirs[t])).createOrReplaceTempView(t)
            started = time.perf_counter()
            spark.sql(q.sql).write.format("noop").mode("overwrite").save()
            return SparkRun("recompute", time.perf_counter() - started, 1)
        finally:
            for t in tables:
                spark.catalog.dropTempView(t)
