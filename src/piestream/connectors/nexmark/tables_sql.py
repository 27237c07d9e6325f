"""SQL for the Nexmark tables (reference §8), used by the benchmarks, the demo and tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from piestream.connectors.nexmark.generator import AUCTION_COLUMNS, BID_COLUMNS, PERSON_COLUMNS

TABLES: dict[str, tuple[str, dict]] = {
    "person": ("Person", PERSON_COLUMNS),
    "auction": ("Auction", AUCTION_COLUMNS),
    "bid": ("Bid", BID_COLUMNS),
}

#: RisingWave's nexmark watermark (e2e_test/nexmark): late events are those 4 s behind the newest
WATERMARK = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND"

_SQL_TYPES = {"bigint": "BIGINT", "character varying": "VARCHAR", "timestamp without time zone": "TIMESTAMP"}


def _columns(cols: dict, pk: str | None) -> str:
    parts = [f"{name} {_SQL_TYPES[str(t)]}" for name, t in cols.items()]
    if pk:
        parts.append(f"PRIMARY KEY ({pk})")
    return ", ".join(parts)


def _quote(v: object) -> str:
    return "'" + str(v).replace("'", "''") + "'"


def nexmark_ddl(
    *,
    kind: str = "table",
    tables: Sequence[str] = ("person", "auction", "bid"),
    split_num: int = 1,
    event_num: int | None = None,
    events_per_second: float | None = None,
    max_rows_per_epoch: int | None = None,
    chunk_size: int | None = None,
    primary_keys: bool = False,
    prefix: str = "",
    options: Mapping[str, object] | None = None,
    watermarks: bool = True,
    proctime: bool = False,
) -> str:
    """CREATE statements for the per-table Nexmark relations (RisingWave's legacy table mode).

    `kind`: "table" (CREATE TABLE ... WITH connector: stored, queryable) or "source" (CREATE
    SOURCE: read by each MV). `events_per_second` is the rate of *events* of each relation's
    generator (all splits together; 0 = unlimited; None = RisingWave's default of 10k/s per
    split); every relation walks the same event sequence, keeping the rows of its kind.
    `primary_keys` declares person.id / auction.id as primary keys (tables only).
    `watermarks`: RisingWave's ``WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND`` on
    every relation that can have one (sources, and tables without a primary key: a watermark
    needs an append-only relation). The generator's event times never run more than a few events
    out of order across splits (each split reads the same number of rows per epoch), far inside
    the 4 seconds, so no event is dropped as late.
    `proctime`: the bid source gets RisingWave's ``p_time TIMESTAMPTZ AS PROCTIME()`` (q12)."""
    if kind not in ("table", "source"):
        raise ValueError("kind must be 'table' or 'source'")
    stmts = []
    for t in tables:
        type_name, cols = TABLES[t]
        opts: dict[str, object] = {
            "connector": "nexmark",
            "nexmark.table.type": type_name,
            "nexmark.split.num": split_num,
        }
        if event_num is not None:
            opts["nexmark.event.num"] = event_num
        if events_per_second is not None:
            opts["nexmark.min.event.gap.in.ns"] = (
                0 if events_per_second <= 0 else max(1, int(1e9 * split_num / events_per_second))
            )
        if max_rows_per_epoch is not None:
            opts["max.rows.per.epoch"] = max_rows_per_epoch
        if chunk_size is not None:
            opts["nexmark.max.chunk.size"] = chunk_size
        opts.update(options or {})
        pk = "id" if primary_keys and kind == "table" and t != "bid" else None
        with_ = ", ".join(f"{k} = {_quote(v)}" for k, v in opts.items())
        obj = "TABLE" if kind == "table" else "SOURCE"
        elements = _columns(cols, pk) + (f", {WATERMARK}" if watermarks and pk is None else "")
        if proctime and kind == "source" and t == "bid":
            elements += ", p_time TIMESTAMPTZ AS PROCTIME()"
        stmts.append(f"CREATE {obj} {prefix}{t} ({elements}) WITH ({with_});")
    return "\n".join(stmts)


def _struct(cols: dict) -> str:
    return "STRUCT<" + ", ".join(f"{n} {_SQL_TYPES[str(t)]}" for n, t in cols.items()) + ">"


def nexmark_combined_ddl(
    *,
    name: str = "nexmark",
    split_num: int = 1,
    event_num: int | None = None,
    events_per_second: float | None = None,
    views: bool = True,
    options: Mapping[str, object] | None = None,
) -> str:
    """RisingWave's combined Nexmark source (one row per event: ``event_type`` and a
    person / auction / bid STRUCT, plus the event time), and the views PERSON / AUCTION / BID
    over it (reference §8), with RisingWave's watermark on the event time."""
    opts: dict[str, object] = {"connector": "nexmark", "nexmark.split.num": split_num}
    if event_num is not None:
        opts["nexmark.event.num"] = event_num
    if events_per_second is not None:
        opts["nexmark.min.event.gap.in.ns"] = (
            0 if events_per_second <= 0 else max(1, int(1e9 * split_num / events_per_second))
        )
    opts.update(options or {})
    with_ = ", ".join(f"{k} = {_quote(v)}" for k, v in opts.items())
    stmts = [
        f"CREATE SOURCE {name} (event_type BIGINT, person {_struct(PERSON_COLUMNS)}, "
        f"auction {_struct(AUCTION_COLUMNS)}, bid {_struct(BID_COLUMNS)}, "
        "date_time TIMESTAMP AS CASE WHEN event_type = 0 THEN (person).date_time "
        "WHEN event_type = 1 THEN (auction).date_time ELSE (bid).date_time END, "
        f"{WATERMARK}) "
        f"WITH ({with_});"
    ]
    if views:
        for kind, (_, cols) in TABLES.items():
            code = {"person": 0, "auction": 1, "bid": 2}[kind]
            fields = ", ".join(f"({kind}).{c} AS {c}" for c in cols)
            stmts.append(f"CREATE VIEW {kind} AS SELECT {fields} FROM {name} WHERE event_type = {code};")
    return "\n".join(stmts)
