"""`piestream serve --demo`: a small live dataset to look at with psql.

Hook for the connector-based demo: `start_demo` first runs `CONNECTOR_DEMO` (Nexmark sources fed
by the nexmark connector, with a few MVs over them); while the connector is not available that
script fails with 0A000 and the fallback runs instead: a table `orders` fed by a background thread
with INSERT / UPDATE / DELETE every `interval` seconds, and MVs over it that stay up to date.
Re-running on the same data directory continues where it stopped (objects are created only once).
"""

from __future__ import annotations

import logging
import random
import threading

from piestream.common.errors import PiestreamError
from piestream.server.database import Database

log = logging.getLogger(__name__)

#: The demo wanted once the Nexmark connector is wired to CREATE SOURCE (issue 7).
CONNECTOR_DEMO = """
CREATE SOURCE IF NOT EXISTS bid (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR
) WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.event.rate = '200');
CREATE MATERIALIZED VIEW IF NOT EXISTS bids_per_auction AS
    SELECT auction, count(*) AS bids, max(price) AS max_price FROM bid GROUP BY auction;
"""

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

TRY_THIS = """Try:
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
        session.execute(CONNECTOR_DEMO)
        log.info("demo: Nexmark source and MVs are running")
        return None
    except PiestreamError as e:
        log.info("demo: connector demo unavailable (%s); feeding a table instead", e.message)
    session.execute(FALLBACK_DEMO)
    return DemoFeeder(db, interval).start()
