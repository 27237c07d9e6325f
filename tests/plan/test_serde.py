"""The versioned plan format (`piestream.plan.serde`): every planned job survives a round trip
exactly, datums of every type keep their value and type, the format is stable (a stored document
of format 1 decodes and re-encodes to the same bytes), and what cannot be read is refused."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from piestream.common.chunk import DataChunk
from piestream.common.interval import Interval
from piestream.common.scalar import to_arrow
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    list_of,
    parse_type,
    struct_of,
)
from piestream.connectors.nexmark.queries import QUERIES, setup_sql
from piestream.connectors.nexmark.tables_sql import nexmark_ddl
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import RelationKind
from piestream.frontend.parser import ast, parse_one
from piestream.frontend.planner import Ids, PlannedJob, plan_materialized_view
from piestream.plan.agg_call import AggCall
from piestream.plan.node import NODE_KINDS
from piestream.plan.numeric_rules import keep_decimal_rules
from piestream.plan.serde import (
    PLAN_FORMAT,
    PlanFormatError,
    decode_fragment,
    decode_fragments,
    encode_fragment,
    encode_fragments,
    from_json,
    to_json,
)
from piestream.server.database import Database, DatabaseConfig

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "plan_format_v1.json"


def _planned(db: Database, sql: str, *, emit_on_window_close: bool = False) -> PlannedJob:
    stmt = parse_one(f"CREATE MATERIALIZED VIEW m AS {sql}")
    assert isinstance(stmt, ast.CreateMaterializedView)
    binder = QueryBinder(db.catalog.snapshot())
    bound = binder.bind_query(stmt.query)
    counter = iter(range(10_000, 20_000))
    ids = Ids(lambda: next(counter), lambda: next(counter), lambda fid: 2)
    return plan_materialized_view(
        bound,
        name="m",
        definition=sql,
        kind=RelationKind.MATERIALIZED_VIEW,
        job_id=1,
        parallelism=2,
        ids=ids,
        depends_on=sorted(binder.dependencies),
        emit_on_window_close=emit_on_window_close,
    )


@pytest.fixture(scope="module")
def nexmark_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(
        tmp_path_factory.mktemp("serde"), config=DatabaseConfig(runner="local", barrier_interval=3600)
    )
    db.execute(nexmark_ddl(kind="table"))
    db.execute(SETUP)
    db.execute(";".join(setup_sql(QUERIES)))  # after SETUP: the goldens' relation ids stay
    yield db
    db.close()


SETUP = """
CREATE TABLE v (k INT PRIMARY KEY, s VARCHAR, a INT[], iv INTERVAL, j JSONB, x DOUBLE PRECISION);
CREATE TABLE ao (a INT, b VARCHAR) APPEND ONLY;
CREATE SOURCE gen (seq BIGINT, r INT) WITH (connector = 'datagen', fields.seq.kind = 'sequence',
    fields.seq.end = '10', datagen.rows.per.second = '0', datagen.split.num = '2');
CREATE SOURCE wgen (seq BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '4' SECOND) WITH (
    connector = 'datagen', fields.seq.kind = 'sequence', fields.seq.end = '10',
    datagen.rows.per.second = '0', datagen.split.num = '2');
"""

#: A format-4 interval join (HashJoin's `interval` band, left out of plans without one).
INTERVAL_JOIN = (
    "SELECT a.seq, b.seq AS s2 FROM wgen a LEFT JOIN wgen b "
    "ON a.seq = b.seq AND b.ts BETWEEN a.ts - INTERVAL '5' SECOND AND a.ts"
)
EXTRA = {
    "literals": "SELECT k, s || 'x' AS s2, iv + INTERVAL '1 day 2 hours' AS iv2, 1.5::NUMERIC * k AS n, "
    "TIMESTAMP '2024-01-01 10:00:00' AS ts, DATE '2024-02-29' AS d, TIME '12:34:56.789' AS t, "
    "'\\x00ff'::BYTEA AS b, 'Infinity'::DOUBLE PRECISION AS inf, j, a[1] AS a1 FROM v WHERE k > -3",
    "values": "SELECT * FROM (VALUES (1, 'one', 1.25, INTERVAL '3 days'), (2, NULL, -0.5, NULL)) "
    "AS c(i, s, n, iv)",
    "sets": "SELECT s, string_agg(s, ',' ORDER BY k DESC) AS agg, count(DISTINCT k) AS c FROM v GROUP BY s",
    "ranks": "SELECT k, rank() OVER (PARTITION BY s ORDER BY x) AS r FROM v",
    "dedup": "SELECT DISTINCT a FROM ao",
    "union": "SELECT k AS id FROM v UNION ALL SELECT a AS id FROM ao",
    "dynamic": "SELECT k, x FROM v WHERE x > (SELECT avg(x) FROM v)",
    "source": "SELECT r, count(*) AS c, max(seq) AS m FROM gen GROUP BY r",
    "join": "SELECT v.k, ao.b FROM v JOIN ao ON v.k = ao.a",
    "hop": "SELECT window_start, count(*) AS c "
    "FROM HOP(bid, date_time, INTERVAL '1' SECOND, INTERVAL '2' SECOND) GROUP BY window_start",
    "top": "SELECT k, x FROM v ORDER BY x DESC LIMIT 3",
    "srf": "SELECT k, unnest(a) AS u, generate_series(1, k) AS g FROM v",
    "frames": "SELECT k, sum(x) OVER (PARTITION BY s ORDER BY k ROWS 2 PRECEDING) AS sx, "
    "lag(k, 1, 0) OVER (PARTITION BY s ORDER BY k) AS lk, count(*) OVER (ORDER BY iv "
    "RANGE BETWEEN INTERVAL '1 day' PRECEDING AND CURRENT ROW) AS c, rank() OVER (ORDER BY x) AS r FROM v",
    "set_ops": "SELECT k FROM v INTERSECT ALL SELECT a FROM ao",
    "watermark": "SELECT seq % 3 AS r, window_start, count(*) AS c "
    "FROM HOP(wgen, ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND) GROUP BY seq % 3, window_start",
    "interval": INTERVAL_JOIN,
}
# (q11 runs with EMIT ON WINDOW CLOSE over watermarked sources only; `EOWC_SESSION` has its nodes)
JOBS = {**{q: nq.sql for q, nq in QUERIES.items() if not (nq.emit_on_window_close or nq.proctime)}, **EXTRA}
#: Jobs whose stored format-1 documents were added after the first ones (node kinds added later).
LATER_GOLDEN_JOBS = ("srf", "frames")
#: The stored format-1 document holds these jobs: between them every node kind.
GOLDEN_JOBS = tuple(
    j for j in EXTRA if j not in LATER_GOLDEN_JOBS and j not in ("set_ops", "watermark", "interval")
)
#: The stored format-3 document: a job with a WatermarkFilter and a watermark-cleaned HashAgg.
GOLDEN_V3 = GOLDEN.with_name("plan_format_v3.json")
#: A format-3 temporal filter (Now feeding a DynamicFilter), the job of `TEMPORAL`.
GOLDEN_TEMPORAL = GOLDEN.with_name("plan_format_v3_temporal.json")
TEMPORAL = "SELECT auction, price FROM bid WHERE date_time > now() - INTERVAL '1 hour'"
#: A format-3 temporal (lookup) join, the job of `TEMPORAL_JOIN`.
GOLDEN_TEMPORAL_JOIN = GOLDEN.with_name("plan_format_v4_temporal_join.json")
TEMPORAL_JOIN = (
    "SELECT ao.a, v.s FROM ao LEFT JOIN v FOR SYSTEM_TIME AS OF PROCTIME() ON ao.a = v.k AND v.x > 0"
)
#: A format-4 AsOf join (new in format 4, so no older plan holds one), the job of `ASOF_JOIN`.
GOLDEN_ASOF_JOIN = GOLDEN.with_name("plan_format_v4_asof_join.json")
ASOF_JOIN = "SELECT v.k, v.s, ao.b FROM v ASOF LEFT JOIN ao ON v.k = ao.a AND v.s >= ao.b"
GOLDEN_INTERVAL_JOIN = GOLDEN.with_name("plan_format_v4_interval_join.json")
#: A format-4 Expand (GROUPING SETS; new in format 4), the job of `EXPAND`.
GOLDEN_EXPAND = GOLDEN.with_name("plan_format_v4_expand.json")
EXPAND = "SELECT k, s, grouping(k, s) AS g, count(*) AS c FROM v GROUP BY ROLLUP (k, s)"
#: A format-4 EowcSort (new in format 4) under an EOWC over-window with a SESSION frame (its
#: `WindowFrame.gap`, a format-4 field), the job of `EOWC_SESSION` planned with EMIT ON WINDOW CLOSE.
GOLDEN_EOWC_SORT = GOLDEN.with_name("plan_format_v4_eowc_sort.json")
EOWC_SESSION = (
    "SELECT seq % 3 AS r, ts, first_value(ts) OVER (PARTITION BY seq % 3 ORDER BY ts "
    "SESSION WITH GAP INTERVAL '2' SECOND) AS s0 FROM wgen"
)
#: A format-4 MaterializedExprs (impure select-list items; new in format 4), the job of `IMPURE`.
GOLDEN_MATERIALIZED_EXPRS = GOLDEN.with_name("plan_format_v4_materialized_exprs.json")
IMPURE = "SELECT k, random() AS r, gen_random_uuid() AS u FROM v"
GOLDEN_STATEMENTS = (
    "CREATE TABLE nopk (a INT, b VARCHAR)",
    "CREATE TABLE gent (seq BIGINT) WITH (connector = 'datagen', fields.seq.kind = 'sequence')",
    "CREATE SINK bh FROM v WITH (connector = 'blackhole')",
)


def golden_documents(db: Database) -> dict[str, object]:
    """What `GOLDEN` holds: the stored plan of each golden job. Regenerate it (with a database
    made like `nexmark_db`) only when the format changes on purpose, with a new format version."""
    for name in GOLDEN_JOBS:
        db.execute(f"CREATE MATERIALIZED VIEW golden_{name} AS {JOBS[name]}")
    db.execute(";".join(GOLDEN_STATEMENTS))
    out: dict[str, object] = {}
    for rel in db.catalog.snapshot().relations():
        if rel.job_id is not None and rel.name not in ("person", "auction", "bid", "v", "ao"):
            out[rel.name] = json.loads(encode_fragments(db.catalog.job_fragments(rel.job_id)))
    return dict(sorted(out.items()))


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_planned_job_round_trips_exactly(nexmark_db: Database, name: str) -> None:
    frags = _planned(nexmark_db, JOBS[name]).job.fragments
    text = encode_fragments(frags)
    back = decode_fragments(text)
    assert back == frags
    assert encode_fragments(back) == text  # stable: decoding and encoding again changes nothing
    for f in frags:
        assert decode_fragment(encode_fragment(f)) == f


def test_an_eowc_aggregation_round_trips_and_plans_without_it_encode_as_before(nexmark_db: Database) -> None:
    frags = _planned(nexmark_db, EXTRA["watermark"], emit_on_window_close=True).job.fragments
    text = encode_fragments(frags)
    assert decode_fragments(text) == frags
    aggs = [n for f in frags for n in f.root.walk() if n.kind == "HashAgg"]
    assert aggs and all(a.emit_on_window_close and a.append_only for a in aggs)
    assert '"emit_on_window_close": true' in text
    # at its default the field is left out: format-3 documents written before it read the same
    plain = encode_fragments(_planned(nexmark_db, EXTRA["watermark"]).job.fragments)
    assert "emit_on_window_close" not in plain


DATUMS = [
    (True, BOOLEAN),
    (-(2**63), BIGINT),
    (1.5, DOUBLE),
    (-0.0, DOUBLE),
    (math.inf, DOUBLE),
    (3.4028234663852886e38, REAL),
    (Decimal("-12345678901234567890.0123456789"), NUMERIC),
    (Decimal("NaN"), NUMERIC),
    ("it's \u00e9\n", VARCHAR),
    (b"\x00\xff", BYTEA),
    (dt.date(2024, 2, 29), DATE),
    (dt.time(23, 59, 59, 999999), TIME),
    (dt.datetime(2024, 1, 1, 10, 0, 0, 1), TIMESTAMP),
    (dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC), TIMESTAMPTZ),
    (Interval(-1, 2, 3), INTERVAL),
    ('{"a": [1, 2.5]}', JSONB),
    ([1, None, 3], list_of(BIGINT)),
    ([[dt.date(2024, 1, 1)], []], list_of(list_of(DATE))),
    ({"x": 1, "y": ["a"]}, struct_of(("x", BIGINT), ("y", list_of(VARCHAR)))),
]


@pytest.mark.parametrize(("value", "t"), DATUMS, ids=[str(t) for _, t in DATUMS])
def test_datums_keep_value_and_type(value: object, t: object) -> None:
    lit = Literal(value, t)
    back = from_json(json.loads(json.dumps(to_json(lit))))
    assert back.return_type == t and type(back.value) is type(value)
    assert repr(back.value) == repr(value)  # exact: -0.0 stays -0.0, NaN stays NaN
    assert parse_type(str(t)) == t


def test_expression_options_travel_with_the_call() -> None:
    now = FuncCall("now", (), TIMESTAMPTZ, (("statement_time", dt.datetime(2024, 5, 1, tzinfo=dt.UTC)),))
    assert from_json(json.loads(json.dumps(to_json(now)))) == now


def test_python_udf_calls_travel_as_source_text() -> None:
    from piestream.common.types import INT
    from piestream.expr.expr import InputRef
    from piestream.expr.udf import PythonUdfCall

    call = PythonUdfCall(
        "f", (InputRef(0, INT),), INT, "def f(x):\n    return x\n", vectorized=True, strict=True
    )
    doc = to_json(call)
    assert doc["@"] == "PythonUdfCall" and doc["source"] == call.source  # no pickle: the text itself
    assert from_json(json.loads(json.dumps(doc))) == call


def test_stored_format_1_documents_read_and_write_back_the_same() -> None:
    """Format 2 only added `type_text`'s display scales, which format-1 types never have; format
    3 per-value-scale NUMERIC, so an older plan is read under the old NUMERIC rules (every
    aggregate call marked, NUMERIC calls wrapped: plan/numeric_rules.py) and written back so."""
    golden = json.loads(GOLDEN.read_text())
    kinds: set[str] = set()
    marked = 0
    for doc in golden.values():
        frags = decode_fragments(json.dumps(doc))
        plain = [from_json(f) for f in doc["fragments"]]
        written = json.loads(encode_fragments(frags))
        assert written == {
            "format": PLAN_FORMAT,
            "fragments": [to_json(f) for f in keep_decimal_rules(plain)],
        }
        assert decode_fragments(json.dumps(written)) == frags  # format 3 keeps the rules as they are
        assert keep_decimal_rules(frags) == frags  # idempotent
        calls = [
            c for f in frags for n in f.root.walk() for c in getattr(n, "calls", ()) if isinstance(c, AggCall)
        ]
        assert all(c.decimal_rules for c in calls)
        marked += len(calls)
        kinds |= {n.kind for f in frags for n in f.root.walk()}
    v3 = json.loads(GOLDEN_V3.read_text())
    assert v3["format"] == 3
    frags = decode_fragments(json.dumps(v3))
    assert json.loads(encode_fragments(frags)) == v3 | {"format": PLAN_FORMAT}
    kinds |= {n.kind for f in frags for n in f.root.walk()}
    aggs = [n for f in frags for n in f.root.walk() if n.kind == "HashAgg"]
    assert aggs and all(a.watermark is not None for a in aggs)
    temporal = json.loads(GOLDEN_TEMPORAL.read_text())
    frags = decode_fragments(json.dumps(temporal))
    assert json.loads(encode_fragments(frags)) == temporal | {"format": PLAN_FORMAT}
    kinds |= {n.kind for f in frags for n in f.root.walk()}
    dfs = [n for f in frags for n in f.root.walk() if n.kind == "DynamicFilter"]
    assert dfs and all(d.rhs_non_decreasing for d in dfs)
    lookup = json.loads(GOLDEN_TEMPORAL_JOIN.read_text())
    frags = decode_fragments(json.dumps(lookup))
    assert json.loads(encode_fragments(frags)) == lookup | {"format": PLAN_FORMAT}
    kinds |= {n.kind for f in frags for n in f.root.walk()}
    for golden in (GOLDEN_ASOF_JOIN, GOLDEN_EXPAND, GOLDEN_EOWC_SORT, GOLDEN_MATERIALIZED_EXPRS):
        doc = json.loads(golden.read_text())
        frags = decode_fragments(json.dumps(doc))
        assert json.loads(encode_fragments(frags)) == doc
        kinds |= {n.kind for f in frags for n in f.root.walk()}
    assert marked and kinds == set(NODE_KINDS)  # a new node kind needs a stored example here


def test_numeric_calls_of_an_old_plan_keep_the_old_rules() -> None:
    """n / 3 and n * 0.5 of a format-2 plan compute at 10 fraction digits without trailing zeros
    (as its view's stored rows were), other calls over them are unchanged."""
    n = InputRef(0, NUMERIC)
    div = FuncCall("divide", (n, Literal(Decimal(3), NUMERIC)), NUMERIC)
    mul = FuncCall("multiply", (n, Literal(Decimal("0.5"), NUMERIC)), NUMERIC)
    cmp = FuncCall("greater_than", (div, mul), BOOLEAN)
    old = keep_decimal_rules(cmp)
    assert old.name == "greater_than"
    assert [a.name for a in old.args] == ["divide_decimal_rules", "numeric_decimal_rules"]
    chunk = DataChunk([to_arrow([Decimal("2.5"), Decimal("1.00")], NUMERIC)])
    assert [str(v) for v in old.args[0].eval(chunk).to_pylist()] == ["0.8333333333", "0.3333333333"]
    assert [str(v) for v in old.args[1].eval(chunk).to_pylist()] == ["1.25", "0.5"]
    assert [str(v) for v in div.eval(chunk).to_pylist()] == [
        "0.83333333333333333333",
        "0.33333333333333333333",
    ]
    assert [str(v) for v in mul.eval(chunk).to_pylist()] == ["1.25", "0.500"]


def test_format_3_watermark_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_V3` (with PIESTREAM_WRITE_GOLDEN=1) only on purpose, with a new format.
    Format 4 (schema evolution) only added fields a plan without ALTER leaves out: such a plan
    is the format-3 document but for its number."""
    doc = json.loads(encode_fragments(_planned(nexmark_db, JOBS["watermark"]).job.fragments))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_V3.write_text(json.dumps(doc | {"format": 3}, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_V3.read_text()) | {"format": PLAN_FORMAT}


def test_temporal_join_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_TEMPORAL_JOIN` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, TEMPORAL_JOIN).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_TEMPORAL_JOIN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_TEMPORAL_JOIN.read_text())
    assert decode_fragments(json.dumps(doc)) == frags


def test_asof_join_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_ASOF_JOIN` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, ASOF_JOIN).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_ASOF_JOIN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_ASOF_JOIN.read_text())
    assert decode_fragments(json.dumps(doc)) == frags
    joins = [n for f in frags for n in f.root.walk() if n.kind == "AsOfJoin"]
    assert len(joins) == 1 and joins[0].outer and joins[0].op == ">="


def test_materialized_exprs_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_MATERIALIZED_EXPRS` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, IMPURE).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_MATERIALIZED_EXPRS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_MATERIALIZED_EXPRS.read_text())
    assert decode_fragments(json.dumps(doc)) == frags
    nodes = [n for f in frags for n in f.root.walk() if n.kind == "MaterializedExprs"]
    assert len(nodes) == 1 and [str(e) for e in nodes[0].exprs] == ["random()", "gen_random_uuid()"]


def test_eowc_sort_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_EOWC_SORT` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, EOWC_SESSION, emit_on_window_close=True).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_EOWC_SORT.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_EOWC_SORT.read_text())
    assert decode_fragments(json.dumps(doc)) == frags
    nodes = [n for f in frags for n in f.root.walk()]
    sorts = [n for n in nodes if n.kind == "EowcSort"]
    assert len(sorts) == 1 and sorts[0].append_only
    frame = next(n for n in nodes if n.kind == "GeneralOverWindow").calls[0].frame
    assert frame.mode == "session" and frame.gap is not None
    # a frame without a gap leaves the field out: earlier format-4 documents read the same
    assert '"gap"' not in encode_fragments(_planned(nexmark_db, EXTRA["frames"]).job.fragments)


def test_what_cannot_be_read_is_refused() -> None:
    newer = f"has format {PLAN_FORMAT + 1}; this piestream reads plan formats up to {PLAN_FORMAT}"
    with pytest.raises(PlanFormatError, match=newer):
        decode_fragments(json.dumps({"format": PLAN_FORMAT + 1, "fragments": []}))
    with pytest.raises(PlanFormatError, match="no format version"):
        decode_fragments("[]")
    with pytest.raises(PlanFormatError, match="unknown type 'Teleport'"):
        from_json({"@": "Teleport"})
    with pytest.raises(PlanFormatError, match=r"Project in a stored plan has unknown fields \['colour'\]"):
        from_json({"@": "Project", "colour": "red"})
    with pytest.raises(PlanFormatError, match="cannot serialize object"):
        to_json(object())


def test_interval_join_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_INTERVAL_JOIN` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, INTERVAL_JOIN).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_INTERVAL_JOIN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_INTERVAL_JOIN.read_text())
    assert decode_fragments(json.dumps(doc)) == frags
    joins = [n for f in frags for n in f.root.walk() if n.kind == "HashJoin"]
    assert len(joins) == 1 and joins[0].interval is not None
    band = joins[0].interval
    assert (band.lower_usecs, band.upper_usecs) == (-5_000_000, 0) and band.clean_left and band.clean_right
    # a join without a band leaves the field out: its document reads as before
    plain = encode_fragments(
        _planned(nexmark_db, INTERVAL_JOIN.replace("BETWEEN", "NOT BETWEEN")).job.fragments
    )
    assert '"IntervalBand"' in json.dumps(doc) and '"IntervalBand"' not in plain


def test_a_cdc_source_node_keeps_its_truncated_table_and_others_encode_as_before() -> None:
    from piestream.common.order import ASC
    from piestream.common.schema import Schema
    from piestream.common.types import Field
    from piestream.plan.serde import from_json, to_json
    from piestream.plan.source import SourceLimits, SourceNode, SourceSpec, source_state_table
    from piestream.storage.table.desc import ColumnDesc, TableDesc

    table = TableDesc(
        table_id=20,
        columns=(ColumnDesc("id", BIGINT),),
        pk=(0,),
        pk_orders=(ASC,),
        dist_key=(0,),
        read_prefix_len_hint=1,
        name="t",
    )
    plain = SourceNode(
        schema=Schema((Field("id", BIGINT),)),
        stream_key=(0,),
        append_only=False,
        spec=SourceSpec("t", "postgres-cdc", (("id", BIGINT),), {}),
        limits=SourceLimits(),
        state_table=source_state_table(21),
        split_ids=("t",),
    )
    cdc = SourceNode(**{**plain.__dict__, "truncates": table})
    assert "truncates" not in to_json(plain)  # a field of format 4 at its default: left out
    assert from_json(to_json(cdc)) == cdc and from_json(to_json(plain)) == plain


def test_expand_golden_is_what_the_planner_writes(nexmark_db: Database) -> None:
    """Regenerate `GOLDEN_EXPAND` (PIESTREAM_WRITE_GOLDEN=1) only on purpose."""
    frags = _planned(nexmark_db, EXPAND).job.fragments
    doc = json.loads(encode_fragments(frags))
    if os.environ.get("PIESTREAM_WRITE_GOLDEN"):
        GOLDEN_EXPAND.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert doc == json.loads(GOLDEN_EXPAND.read_text())
    assert decode_fragments(json.dumps(doc)) == frags
    (expand,) = [n for f in frags for n in f.root.walk() if n.kind == "Expand"]
    assert expand.subsets == ((0, 1), (0,)) and expand.key_cols == (0, 1)
