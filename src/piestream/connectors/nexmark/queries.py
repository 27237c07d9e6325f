"""The Nexmark queries in RisingWave's SQL (reference §8; performance-anchors §1.2).

Each query is the SELECT of RisingWave's benchmark sink (``CREATE SINK nexmark_qN AS <select>
WITH (connector = 'blackhole')``), over the per-table relations ``person``, ``auction`` and
``bid``. Rewrites kept local to the query text (as RisingWave's own variants do) are noted:

- q3 compares with the upper-case states the generator emits (``'OR'``, ``'ID'``, ``'CA'``, as
  Flink's query; RisingWave's e2e copy lower-cases them and matches nothing);
- q14 inlines RisingWave's SQL UDF ``count_char(s, c) = length(s) - length(replace(s, c, ''))``.

q11 (session windows: bids per bidder per session of activity with a 10 s gap) is written with
RisingWave's SESSION frame and runs with EMIT ON WINDOW CLOSE (`emit_on_window_close`), as
RisingWave allows session frames only there: so it needs watermarked sources, and its answer is
the query over the final bids (those below the watermark).
q13 (a bounded side input) is Nexmark's: every bid joined, by ``auction % 10000``, with a
``side_input`` table of 10,000 rows, through the temporal (lookup) join ``FOR SYSTEM_TIME AS OF
PROCTIME()`` as RisingWave writes it; its `setup` creates and fills the table (`setup_sql`), which
the bench and the tests run before the query. q12 (processing-time windows) counts each
bidder's bids per 10 s TUMBLE of RisingWave's ``p_time TIMESTAMPTZ AS PROCTIME()`` column, so it
reads a bid SOURCE declared with it (`proctime`; `nexmark_ddl(proctime=True)`): its windows
depend on when epochs ran, its per-bidder totals do not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class NexmarkQuery:
    """One query: its name, the tables it reads and its SELECT."""

    name: str
    tables: tuple[str, ...]
    sql: str
    note: str = ""
    #: statements run once before the query (tables besides the Nexmark relations)
    setup: tuple[str, ...] = ()
    #: created with EMIT ON WINDOW CLOSE (watermarked sources only)
    emit_on_window_close: bool = False
    #: reads the bid source's ``p_time TIMESTAMPTZ AS PROCTIME()`` column (sources only)
    proctime: bool = False

    @property
    def emit(self) -> str:
        """The clause after the SELECT ("" or " EMIT ON WINDOW CLOSE")."""
        return " EMIT ON WINDOW CLOSE" if self.emit_on_window_close else ""


#: q13's bounded side input: 10,000 keys, each with its text
SIDE_INPUT = (
    "CREATE TABLE side_input (key BIGINT PRIMARY KEY, value VARCHAR)",
    "INSERT INTO side_input SELECT v, v::varchar FROM generate_series(0, 9999) AS s(v)",
)


_BAND1 = "price < 10000"
_BAND2 = "price >= 10000 AND price < 1000000"
_BAND3 = "price >= 1000000"


def _bands(col: str, distinct: bool) -> str:
    d = "DISTINCT " if distinct else ""
    return ",\n    ".join(
        [f"count({d}{col}) AS total_{col}s" if distinct else "count(*) AS total_bids"]
        + [
            (f"count({d}{col})" if distinct else "count(*)") + f" FILTER (WHERE {band}) AS rank{i}_"
            f"{col + 's' if distinct else 'bids'}"
            for i, band in enumerate((_BAND1, _BAND2, _BAND3), 1)
        ]
    )


_Q15_AGGS = ",\n    ".join([_bands("*", False), _bands("bidder", True), _bands("auction", True)])

QUERIES: dict[str, NexmarkQuery] = {
    q.name: q
    for q in [
        NexmarkQuery("q0", ("bid",), "SELECT auction, bidder, price, date_time FROM bid"),
        NexmarkQuery(
            "q1",
            ("bid",),
            "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
        ),
        NexmarkQuery(
            "q2",
            ("bid",),
            "SELECT auction, price FROM bid WHERE auction = 1007 OR auction = 1020 OR auction = 2001 "
            "OR auction = 2019 OR auction = 2087",
        ),
        NexmarkQuery(
            "q3",
            ("auction", "person"),
            "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P "
            "ON A.seller = P.id WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' "
            "OR P.state = 'CA')",
            note="states upper-case, as the generator emits them",
        ),
        NexmarkQuery(
            "q4",
            ("auction", "bid"),
            """SELECT Q.category, AVG(Q.final) AS avg
FROM (
    SELECT MAX(B.price) AS final, A.category
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
    GROUP BY A.id, A.category
) Q
GROUP BY Q.category""",
        ),
        NexmarkQuery(
            "q5",
            ("bid",),
            """SELECT AuctionBids.auction, AuctionBids.num
FROM (
    SELECT auction, count(*) AS num, window_start AS starttime
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY auction, window_start
) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime_c
    FROM (
        SELECT count(*) AS num, window_start AS starttime_c
        FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
        GROUP BY auction, window_start
    ) AS CountBids
    GROUP BY CountBids.starttime_c
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime_c AND AuctionBids.num >= MaxBids.maxn""",
        ),
        NexmarkQuery(
            "q6",
            ("auction", "bid"),
            """SELECT Q.seller,
    AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time
                       ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
FROM (
    SELECT ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price) AS rank,
        A.seller, B.price AS final, B.date_time
    FROM auction AS A, bid AS B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
) AS Q
WHERE Q.rank <= 1""",
            note="RisingWave's q6_group_top1",
        ),
        NexmarkQuery(
            "q7",
            ("bid",),
            """SELECT B.auction, B.price, B.bidder, B.date_time
FROM bid B
JOIN (
    SELECT MAX(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_end
) B1 ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time""",
        ),
        NexmarkQuery(
            "q8",
            ("person", "auction"),
            """SELECT P.id, P.name, P.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
        ),
        NexmarkQuery(
            "q9",
            ("auction", "bid"),
            """SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category,
    auction, bidder, price, bid_date_time
FROM (
    SELECT A.*, B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
        ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC) AS rownum
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
) tmp
WHERE rownum <= 1""",
        ),
        NexmarkQuery(
            "q10",
            ("bid",),
            "SELECT auction, bidder, price, date_time, TO_CHAR(date_time, 'YYYY-MM-DD') AS date, "
            "TO_CHAR(date_time, 'HH:MI') AS time FROM bid",
        ),
        NexmarkQuery(
            "q11",
            ("bid",),
            """SELECT bidder, count(*) AS bid_count, starttime, endtime
FROM (
    SELECT bidder,
        first_value(date_time) OVER w AS starttime,
        last_value(date_time) OVER w + INTERVAL '10' SECOND AS endtime
    FROM bid
    WINDOW w AS (PARTITION BY bidder ORDER BY date_time SESSION WITH GAP INTERVAL '10' SECOND)
) s
GROUP BY bidder, starttime, endtime""",
            emit_on_window_close=True,
        ),
        NexmarkQuery(
            "q12",
            ("bid",),
            "SELECT bidder, count(*) AS bid_count, window_start, window_end "
            "FROM TUMBLE(bid, p_time, INTERVAL '10' SECOND) GROUP BY bidder, window_start, window_end",
            note="processing-time windows over the source's PROCTIME() column",
            proctime=True,
        ),
        NexmarkQuery(
            "q13",
            ("bid",),
            "SELECT B.auction, B.bidder, B.price, B.date_time, S.value FROM bid B "
            "JOIN side_input FOR SYSTEM_TIME AS OF PROCTIME() S ON mod(B.auction, 10000) = S.key",
            note="the side input joined by a temporal (lookup) join",
            setup=SIDE_INPUT,
        ),
        NexmarkQuery(
            "q14",
            ("bid",),
            """SELECT auction, bidder, 0.908 * price AS price,
    CASE
        WHEN extract(hour FROM date_time) >= 8 AND extract(hour FROM date_time) <= 18 THEN 'dayTime'
        WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN 'nightTime'
        ELSE 'otherTime'
    END AS bidTimeType,
    date_time,
    length(extra) - length(replace(extra, 'c', '')) AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
            note="the SQL UDF count_char inlined",
        ),
        NexmarkQuery(
            "q15",
            ("bid",),
            f"""SELECT to_char(date_time, 'YYYY-MM-DD') AS day,
    {_Q15_AGGS}
FROM bid
GROUP BY to_char(date_time, 'YYYY-MM-DD')""",
        ),
        NexmarkQuery(
            "q16",
            ("bid",),
            f"""SELECT channel, to_char(date_time, 'YYYY-MM-DD') AS day,
    max(to_char(date_time, 'HH:mm')) AS minute,
    {_Q15_AGGS}
FROM bid
GROUP BY channel, to_char(date_time, 'YYYY-MM-DD')""",
        ),
        NexmarkQuery(
            "q17",
            ("bid",),
            f"""SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day,
    {_bands("*", False)},
    min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
FROM bid
GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')""",
        ),
        NexmarkQuery(
            "q18",
            ("bid",),
            """SELECT auction, bidder, price, channel, url, date_time, extra
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, extra) AS rank_number
    FROM bid
) t
WHERE rank_number <= 1""",
        ),
        NexmarkQuery(
            "q19",
            ("bid",),
            """SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number FROM bid
) t
WHERE rank_number <= 10""",
        ),
        NexmarkQuery(
            "q20",
            ("auction", "bid"),
            """SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time,
    B.extra AS bid_extra, item_name, description, initial_bid, reserve,
    A.date_time AS auction_date_time, expires, seller, category, A.extra AS auction_extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
WHERE A.category = 10""",
        ),
        NexmarkQuery(
            "q21",
            ("bid",),
            """SELECT auction, bidder, price, channel,
    CASE
        WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1'
        WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3'
        ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2]
    END AS channel_id
FROM bid
WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] IS NOT NULL
    OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
        ),
        NexmarkQuery(
            "q22",
            ("bid",),
            "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
            "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
        ),
        NexmarkQuery(
            "q101",
            ("auction", "bid"),
            """SELECT a.id AS auction_id, a.item_name AS auction_item_name, b.max_price AS current_highest_bid
FROM auction a
LEFT OUTER JOIN (
    SELECT b1.auction, MAX(b1.price) AS max_price FROM bid b1 GROUP BY b1.auction
) b ON a.id = b.auction""",
        ),
        NexmarkQuery(
            "q102",
            ("auction", "bid"),
            """SELECT a.id AS auction_id, a.item_name AS auction_item_name, COUNT(b.auction) AS bid_count
FROM auction a
JOIN bid b ON a.id = b.auction
GROUP BY a.id, a.item_name
HAVING COUNT(b.auction) >= (SELECT COUNT(*) / COUNT(DISTINCT auction) FROM bid)""",
        ),
        NexmarkQuery(
            "q103",
            ("auction", "bid"),
            """SELECT a.id AS auction_id, a.item_name AS auction_item_name
FROM auction a
WHERE a.id IN (SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) >= 20)""",
        ),
        NexmarkQuery(
            "q104",
            ("auction", "bid"),
            """SELECT a.id AS auction_id, a.item_name AS auction_item_name
FROM auction a
WHERE a.id NOT IN (SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) < 20)""",
        ),
        NexmarkQuery(
            "q105",
            ("auction", "bid"),
            """SELECT a.id AS auction_id, a.item_name AS auction_item_name, COUNT(b.auction) AS bid_count
FROM auction a
JOIN bid b ON a.id = b.auction
GROUP BY a.id, a.item_name
ORDER BY bid_count DESC
LIMIT 1000""",
        ),
        NexmarkQuery(
            "q106",
            ("auction", "bid"),
            """SELECT MIN(final) AS min_final
FROM (
    SELECT auction.id, MAX(price) AS final
    FROM auction, bid
    WHERE bid.auction = auction.id AND bid.date_time BETWEEN auction.date_time AND auction.expires
    GROUP BY auction.id
) t""",
        ),
    ]
}

#: the queries of the issue's targets: ≥ 150K events/s/core ("stateless") or ≥ 40K ("stateful")
STATELESS_TARGET = 150_000
STATEFUL_TARGET = 40_000
STATELESS = ("q0", "q1", "q2", "q14", "q21", "q22")
STATEFUL = ("q3", "q4", "q5", "q7", "q8", "q9", "q15", "q16", "q17", "q18", "q19", "q20")


def target_per_core(name: str) -> int | None:
    """The issue's per-core target for a query (None: no target set)."""
    if name in STATELESS:
        return STATELESS_TARGET
    if name in STATEFUL:
        return STATEFUL_TARGET
    return None


def query_names(spec: str) -> list[str]:
    """``"q0,q1,q5"``, ``"all"`` or ranges like ``"q0-q9"`` → known query names, in order."""
    names: list[str] = []
    order = list(QUERIES)
    for part in (p.strip().lower() for p in spec.split(",")):
        if not part:
            continue
        if part == "all":
            names += order
        elif "-" in part:
            lo, hi = part.split("-", 1)
            if lo not in QUERIES or hi not in QUERIES:
                raise ValueError(f"unknown query range {part!r}")
            names += order[order.index(lo) : order.index(hi) + 1]
        elif part in QUERIES:
            names.append(part)
        else:
            raise ValueError(f"unknown query {part!r} (known: {', '.join(order)})")
    return list(dict.fromkeys(names))


def setup_sql(names: Iterable[str]) -> list[str]:
    """The `setup` statements of the queries `names`, each once, in order."""
    out: list[str] = []
    for n in names:
        out += [st for st in QUERIES[n].setup if st not in out]
    return out
