"""`piestream serve --demo`: a small live dataset to look at with psql.

`start_demo` creates the Nexmark auction tables ``person``, ``auction`` and ``bid`` (APPEND ONLY
tables fed by the nexmark connector at `DEMO_EVENT_RATE` events per second, event times starting
now and advancing with the wall clock) and a few materialized views over them that change every
second (`NEXMARK_MVS`). If that fails (no connector), the fallback runs instead: a table
`orders` fed by a background thread with INSERT / UPDATE / DELETE every `interval` seconds, and
MVs over it. Re-running on the same data directory continues where it stopped (objects are
created only once; the generators resume from their committed offsets).
"""

from __future__ import annotations

import logging
import random
import threading
import time

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

log = logging.getLogger(__name__)

#: events per second (all kinds: 2% people, 6% auctions, 92% bids), and of event time
DEMO_EVENT_RATE = 500

_NEXMARK_TABLES = {
    "person": (
        "Person",
        "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR, "
        "state VARCHAR, date_time TIMESTAMP, extra VARCHAR",
    ),
    "auction": (
        "Auction",
        "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT, "
        "date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR",
    ),
    "bid": (
        "Bid",
        "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, "
        "date_time TIMESTAMP, extra VARCHAR",
    ),
}


def nexmark_demo_tables(rate: int = DEMO_EVENT_RATE, base_time_ms: int | None = None) -> str:
    """CREATE TABLE IF NOT EXISTS for the three Nexmark tables: every one walks the same event
    sequence (so bids name auctions and people that exist) at `rate` events per second, event
    time advancing 1 s per second of wall clock from `base_time_ms` (default: now)."""
    base = int(time.time() * 1000) if base_time_ms is None else base_time_ms
    stmts = []
    for name, (kind, cols) in _NEXMARK_TABLES.items():
        stmts.append(
            f"CREATE TABLE IF NOT EXISTS {name} ({cols}) APPEND ONLY WITH (connector = 'nexmark', "
            f"nexmark.table.type = '{kind}', nexmark.event.rate = '{rate}', "
            f"nexmark.first.event.rate = '{rate}', nexmark.base.time = '{base}');"
        )
    return "\n".join(stmts)


#: the demo's MVs: Nexmark q5 / q7 / q9 shapes and a plain aggregate, kept up to date every epoch
NEXMARK_MVS = """
CREATE MATERIALIZED VIEW IF NOT EXISTS bids_per_auction AS
    SELECT auction, count(*) AS bids, max(price) AS max_price FROM bid GROUP BY auction;
CREATE MATERIALIZED VIEW IF NOT EXISTS price_per_window AS
    SELECT window_start, window_end, count(*) AS bids, max(price) AS max_price
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end;
CREATE MATERIALIZED VIEW IF NOT EXISTS hot_items AS
    SELECT b.window_start, b.auction, b.bids
    FROM (
        SELECT auction, window_start, count(*) AS bids
        FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
        GROUP BY auction, window_start
    ) b
    JOIN (
        SELECT window_start, max(bids) AS max_bids
        FROM (
            SELECT auction, window_start, count(*) AS bids
            FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
            GROUP BY auction, window_start
        ) c
        GROUP BY window_start
    ) m ON b.window_start = m.window_start AND b.bids >= m.max_bids;
CREATE MATERIALIZED VIEW IF NOT EXISTS winning_bids AS
    SELECT auction, item_name, seller, category, bidder, price, bid_time
    FROM (
        SELECT A.id AS auction, A.item_name, A.seller, A.category, B.bidder, B.price,
            B.date_time AS bid_time,
            ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
        FROM auction A JOIN bid B ON A.id = B.auction
        WHERE B.date_time BETWEEN A.date_time AND A.expires
    ) t
    WHERE rownum = 1;
"""

NEXMARK_TRY_THIS = """Try (Nexmark auctions: tables person, auction, bid, fed live):
  SELECT * FROM hot_items ORDER BY window_start DESC LIMIT 5;       -- the most-bid auction per 10 s window
  SELECT * FROM price_per_window ORDER BY window_start DESC LIMIT 5; -- run it twice: it changes
  SELECT * FROM winning_bids ORDER BY price DESC LIMIT 5;
  SELECT * FROM bids_per_auction ORDER BY bids DESC LIMIT 5;
  SELECT auction, bidder, price, channel, date_time FROM bid LIMIT 5;
  CREATE MATERIALIZED VIEW bids_per_channel AS SELECT channel, count(*) AS bids FROM bid GROUP BY channel;
  \\dt   \\dm   \\d bid"""

FALLBACK_DEMO = """
CREATE TABLE IF NOT EXISTS orders (
    order_id BIGINT PRIMARY KEY, customer VARCHAR, product VARCHAR, amount NUMERIC, created_at TIMESTAMP
);
CREATE MATERIALIZED VIEW IF NOT EXISTS revenue_by_customer AS
    SELECT customer, count(*) AS orders, sum(amount) AS revenue FROM orders GROUP BY customer;
CREATE MATERIALIZED VIEW IF NOT EXISTS big_orders AS
    SELECT order_id, customer, product, amount FROM orders WHERE amount > 90;
CREATE MATERIALIZED VIEW IF NOT EXISTS order_count AS SELECT count(*) AS orders FROM orders;
"""

_CUSTOMERS = ["alice", "bob", "carol", "dave", "erin", "frank"]
_PRODUCTS = ["apples", "bread", "coffee", "dates", "eggs"]

FALLBACK_TRY_THIS = """Try:
  SELECT * FROM revenue_by_customer ORDER BY revenue DESC;
  SELECT * FROM order_count;            -- run it twice: it grows
  INSERT INTO orders VALUES (1000000, 'zoe', 'tea', 120, now()::timestamp);
  SELECT * FROM big_orders WHERE customer = 'zoe';
  \\dt   \\dm   \\d orders"""


class DemoFeeder:
    """Writes a few orders every `interval` seconds until stopped."""

    def __init__(self, db: Database, interval: float = 1.0, seed: int | None = None) -> None:
        self.db = db
        self.interval = interval
        self.rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="piestream-demo", daemon=True)
        self.next_id = 1

    def start(self) -> DemoFeeder:
        session = self.db.session()
        result = session.execute("SELECT coalesce(max(order_id), 0) FROM orders")[0]
        self.next_id = int(result.rows[0][0]) + 1
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        session = self.db.session()
        while not self._stop.wait(self.interval):
            try:
                session.execute(self._batch())
            except PiestreamError as e:
                log.warning("demo feed: %s", e.message)

    def _batch(self) -> str:
        rng = self.rng
        values = []
        for _ in range(rng.randint(1, 5)):
            values.append(
                f"({self.next_id}, '{rng.choice(_CUSTOMERS)}', '{rng.choice(_PRODUCTS)}', "
                f"{rng.randint(1, 100)}, now()::timestamp)"
            )
            self.next_id += 1
        sql = f"INSERT INTO orders VALUES {', '.join(values)};"
        if self.next_id > 10 and rng.random() < 0.3:
            target = rng.randint(1, self.next_id - 1)
            sql += f" UPDATE orders SET amount = amount + 10 WHERE order_id = {target};"
        if self.next_id > 10 and rng.random() < 0.2:
            sql += f" DELETE FROM orders WHERE order_id = {rng.randint(1, self.next_id - 1)};"
        return sql


def start_demo(db: Database, interval: float = 1.0) -> DemoFeeder | None:
    """Create the demo objects and start feeding them; returns the feeder to stop (if any)."""
    session = db.session()
    try:
        session.execute(nexmark_demo_tables())
        session.execute(NEXMARK_MVS)
        log.info("demo: Nexmark tables and MVs are running")
        return None
    except PiestreamError as e:
        log.info("demo: Nexmark demo unavailable (%s); feeding a table instead", e.message)
    session.execute(FALLBACK_DEMO)
    return DemoFeeder(db, interval).start()


def try_this(db: Database) -> str:
    """What to type in psql, for whichever demo is running."""
    return NEXMARK_TRY_THIS if db.catalog.get("hot_items") is not None else FALLBACK_TRY_THIS
