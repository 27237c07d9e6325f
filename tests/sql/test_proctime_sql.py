"""``PROCTIME()`` outside a SOURCE's ``c TIMESTAMPTZ AS PROCTIME()`` column is refused with
RisingWave's texts (q12 in `test_nexmark_sql` covers the column's values)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from paired import open_db

from piestream.common.errors import PiestreamError
from piestream.connectors.nexmark.config import NexmarkConfig
from piestream.connectors.nexmark.spark_baseline import event_table
from piestream.server.database import Database

_BID = "WITH (connector = 'nexmark', nexmark.table.type = 'Bid', nexmark.event.num = '10')"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "db")
    d.execute(f"CREATE SOURCE bid (auction BIGINT, p_time TIMESTAMPTZ AS PROCTIME()) {_BID}")
    yield d
    d.close()


@pytest.mark.parametrize(
    ("sql", "state", "text"),
    [
        ("SELECT proctime()", "0A000", "only allowed in CREATE TABLE/SOURCE"),
        ("CREATE MATERIALIZED VIEW m AS SELECT auction, proctime() FROM bid", "0A000", "Is `NOW()`"),
        (f"CREATE TABLE t (auction BIGINT, p TIMESTAMPTZ AS PROCTIME()) {_BID}", "0A000", "SOURCE only"),
        (f"CREATE SOURCE b2 (auction BIGINT, p TIMESTAMP AS PROCTIME()) {_BID}", "42804", "TIMESTAMPTZ"),
        ("SELECT * FROM bid", "0A000", "cannot query a source directly"),
    ],
)
def test_proctime_elsewhere_is_refused(db: Database, sql: str, state: str, text: str) -> None:
    with pytest.raises(PiestreamError) as e:
        db.execute(sql)
    assert e.value.sqlstate == state and text in str(e.value), e.value


def test_a_view_reading_only_the_proctime_column_still_reads_the_connector(db: Database) -> None:
    db.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c, count(DISTINCT p_time) AS d FROM bid")
    bids = event_table(NexmarkConfig(), "bid", 0, 10).num_rows
    for _ in range(100):
        got = db.execute("SELECT c, d FROM n")[0].rows
        if got and got[0][0] == bids:
            break
        db.execute("FLUSH")
    assert bids > 0 and got and got[0][0] == bids and got[0][1] >= 1
