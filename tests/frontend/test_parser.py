"""The SQL parser: statement dataclasses, query trees the binder consumes, PostgreSQL-style errors."""

from __future__ import annotations

import logging

import pytest
from sqlglot import exp

from piestream.common.errors import FeatureNotSupported, PiestreamError, SyntaxError_
from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    SERIAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    list_of,
    struct_of,
)
from piestream.frontend.parser import (
    Begin,
    ColumnDef,
    Commit,
    CreateFunction,
    CreateIndex,
    CreateMaterializedView,
    CreateSink,
    CreateSource,
    CreateTable,
    CreateView,
    Delete,
    Describe,
    Discard,
    Drop,
    DropFunction,
    Explain,
    Flush,
    FormatEncode,
    FunctionArg,
    IndexColumn,
    Insert,
    Query,
    ReleaseSavepoint,
    ResetAll,
    Rollback,
    RollbackToSavepoint,
    Savepoint,
    SetTransaction,
    SetVariable,
    ShowCreate,
    ShowObjects,
    ShowVariable,
    Statement,
    Update,
    Watermark,
    ast,
    parse,
    parse_one,
)
from piestream.frontend.parser.ast import CreateSchema, DropSchema
from piestream.frontend.parser.dialect import Piestream
from piestream.frontend.parser.names import ObjectName, object_name, schema_of


def one(sql: str, kind: type[Statement]) -> Statement:
    stmt = parse_one(sql)
    assert isinstance(stmt, kind), stmt
    return stmt


def query_of(sql: str) -> exp.Expression:
    stmt = parse_one(sql)
    assert isinstance(stmt, Query), stmt
    return stmt.query


def fails(sql: str, error: type[PiestreamError] = SyntaxError_) -> PiestreamError:
    with pytest.raises(error) as info:
        parse(sql)
    return info.value


# ---------------------------------------------------------------------------------------------
# Nexmark DDL
# ---------------------------------------------------------------------------------------------

NEXMARK_TABLES = """
-- the three Nexmark streams as tables
CREATE TABLE person (
    id BIGINT PRIMARY KEY, name VARCHAR, email_address VARCHAR, credit_card VARCHAR,
    city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR
);
CREATE TABLE auction (id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
    reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT,
    extra VARCHAR, PRIMARY KEY (id));
/* bids: no key, append-only */
CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
    date_time TIMESTAMP, extra VARCHAR) APPEND ONLY;
"""

NEXMARK_SOURCE = """CREATE SOURCE nexmark (
    event_type BIGINT,
    person STRUCT<id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, city VARCHAR,
                  state VARCHAR, date_time TIMESTAMP, extra VARCHAR>,
    auction STRUCT<id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, reserve BIGINT,
                   date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT, extra VARCHAR>,
    bid STRUCT<auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
               date_time TIMESTAMP, extra VARCHAR>,
    date_time TIMESTAMP AS
        CASE event_type WHEN 0 THEN (person).date_time WHEN 1 THEN (auction).date_time
        ELSE (bid).date_time END,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (connector = 'nexmark', nexmark.split.num = '2', nexmark.min.event.gap.in.ns = 100)"""


def test_nexmark_tables() -> None:
    person, auction, bid = parse(NEXMARK_TABLES)
    assert (
        isinstance(person, CreateTable) and isinstance(auction, CreateTable) and isinstance(bid, CreateTable)
    )
    assert person.name == "person" and person.primary_key == ["id"]
    assert person.columns[0] == ColumnDef("id", BIGINT, primary_key=True)
    assert [c.name for c in auction.columns][-3:] == ["seller", "category", "extra"]
    assert auction.primary_key == ["id"] and not auction.columns[0].primary_key
    assert bid.append_only and bid.primary_key == [] and bid.on_conflict is None
    assert [(c.name, c.type) for c in bid.columns] == [
        ("auction", BIGINT),
        ("bidder", BIGINT),
        ("price", BIGINT),
        ("channel", VARCHAR),
        ("url", VARCHAR),
        ("date_time", TIMESTAMP),
        ("extra", VARCHAR),
    ]
    assert bid.text.startswith("CREATE TABLE bid") and bid.text.endswith("APPEND ONLY")


def test_nexmark_source() -> None:
    src = one(NEXMARK_SOURCE, CreateSource)
    assert src.name == "nexmark"
    assert src.with_options == {
        "connector": "nexmark",
        "nexmark.split.num": "2",
        "nexmark.min.event.gap.in.ns": "100",
    }
    names = [c.name for c in src.columns]
    assert names == ["event_type", "person", "auction", "bid", "date_time"]
    bid_type = src.columns[3].type
    assert bid_type == struct_of(
        ("auction", BIGINT),
        ("bidder", BIGINT),
        ("price", BIGINT),
        ("channel", VARCHAR),
        ("url", VARCHAR),
        ("date_time", TIMESTAMP),
        ("extra", VARCHAR),
    )
    generated = src.columns[4]
    assert generated.type == TIMESTAMP and isinstance(generated.generated, exp.Case)
    assert isinstance(generated.generated.find(exp.Dot), exp.Dot)  # (person).date_time
    [watermark] = src.watermarks
    assert watermark == Watermark("date_time", watermark.expr)
    column, expr = watermark  # tuple-like, as the binder unpacks it
    assert column == "date_time" and isinstance(expr, exp.Sub) and isinstance(expr.expression, exp.Interval)


def test_nexmark_views_over_the_source() -> None:
    stmts = parse(
        NEXMARK_SOURCE
        + """;
        CREATE VIEW bid AS SELECT (bid).auction, (bid).bidder, (bid).price, (bid).channel, (bid).url,
            date_time, (bid).extra FROM nexmark WHERE event_type = 2;
        CREATE VIEW person AS SELECT (person).id, (person).name FROM nexmark WHERE event_type = 0;"""
    )
    assert [type(s) for s in stmts] == [CreateSource, CreateView, CreateView]
    bid = stmts[1]
    assert isinstance(bid, CreateView) and bid.name == "bid" and bid.columns is None
    assert bid.sql_text.startswith("SELECT (bid).auction") and bid.sql_text.endswith("event_type = 2")
    # a view's stored text re-parses to the same query (the binder re-binds it on every use)
    assert query_of(bid.sql_text) == bid.query


# ---------------------------------------------------------------------------------------------
# CREATE TABLE
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("boolean", BOOLEAN),
        ("bool", BOOLEAN),
        ("smallint", SMALLINT),
        ("int2", SMALLINT),
        ("int", INT),
        ("integer", INT),
        ("int4", INT),
        ("bigint", BIGINT),
        ("int8", BIGINT),
        ("serial", SERIAL),
        ("numeric", NUMERIC),
        ("decimal(10, 2)", NUMERIC),
        ("real", REAL),
        ("float4", REAL),
        ("float(10)", REAL),
        ("double precision", DOUBLE),
        ("float8", DOUBLE),
        ("float", DOUBLE),
        ("varchar", VARCHAR),
        ("character varying(20)", VARCHAR),
        ("text", VARCHAR),
        ("string", VARCHAR),
        ("bytea", BYTEA),
        ("date", DATE),
        ("time", TIME),
        ("time without time zone", TIME),
        ("timestamp", TIMESTAMP),
        ("timestamp(3)", TIMESTAMP),
        ("timestamp without time zone", TIMESTAMP),
        ("timestamptz", TIMESTAMPTZ),
        ("timestamp with time zone", TIMESTAMPTZ),
        ("interval", INTERVAL),
        ("interval day to second", INTERVAL),
        ("jsonb", JSONB),
        ("int[]", list_of(INT)),
        ("varchar[][]", list_of(list_of(VARCHAR))),
        ("int[3]", list_of(INT)),
        ("struct<a int, b varchar>", struct_of(("a", INT), ("b", VARCHAR))),
        (
            'STRUCT<A INT, "B" STRUCT<c DOUBLE PRECISION>>',
            struct_of(("a", INT), ("B", struct_of(("c", DOUBLE)))),
        ),
        ("struct<x int[], y timestamptz>[]", list_of(struct_of(("x", list_of(INT)), ("y", TIMESTAMPTZ)))),
    ],
)
def test_column_types(spelling: str, expected: DataType) -> None:
    t = one(f"CREATE TABLE t (c {spelling}, d int)", CreateTable)
    assert t.columns[0].type == expected
    assert t.columns[1] == ColumnDef("d", INT)


def test_column_constraints() -> None:
    t = one(
        """CREATE TABLE IF NOT EXISTS Public.T (
            Id INT NOT NULL PRIMARY KEY,
            "Name" VARCHAR NULL DEFAULT 'x' || 'y',
            n INT DEFAULT 0 NOT NULL,
            doubled INT AS id * 2,
            untyped AS id + 1,
            stored BIGINT GENERATED ALWAYS AS (id + 2) STORED,
            p_time TIMESTAMPTZ AS proctime(),
            c INT CONSTRAINT c_nn NOT NULL
        )""",
        CreateTable,
    )
    assert t.name == "t" and schema_of(t.name) == "public" and t.if_not_exists
    assert t.primary_key == ["id"]
    cols = {c.name: c for c in t.columns}
    assert list(cols) == ["id", "Name", "n", "doubled", "untyped", "stored", "p_time", "c"]
    assert cols["id"].not_null and cols["id"].primary_key
    assert not cols["Name"].not_null and isinstance(cols["Name"].default, exp.DPipe)
    assert cols["n"].not_null and cols["n"].default == exp.Literal.number(0)
    assert cols["doubled"].type == INT and isinstance(cols["doubled"].generated, exp.Mul)
    assert cols["untyped"].type is None and isinstance(cols["untyped"].generated, exp.Add)
    assert cols["stored"].type == BIGINT and isinstance(cols["stored"].generated, exp.Add)
    generated = cols["p_time"].generated
    assert isinstance(generated, exp.Anonymous) and generated.name == "proctime"
    assert cols["c"].not_null
    # unquoted identifiers inside expressions are folded too
    assert cols["doubled"].generated.find(exp.Column).name == "id"


def test_table_primary_key_forms() -> None:
    t = one("CREATE TABLE t (a INT, b INT, CONSTRAINT pk PRIMARY KEY (b, a))", CreateTable)
    assert t.primary_key == ["b", "a"]
    err = fails("CREATE TABLE t (a INT PRIMARY KEY, b INT, PRIMARY KEY (b))", PiestreamError)
    assert err.sqlstate == "42P16" and err.position == 43


@pytest.mark.parametrize(
    ("clause", "expected"),
    [
        ("ON CONFLICT DO NOTHING", "do_nothing"),
        ("ON CONFLICT DO UPDATE FULL", "do_update_full"),
        ("ON CONFLICT DO UPDATE IF NOT NULL", "do_update_if_not_null"),
        ("on conflict do update if not null", "do_update_if_not_null"),
        ("ON CONFLICT OVERWRITE", "do_update_full"),
        ("ON CONFLICT IGNORE", "do_nothing"),
    ],
)
def test_on_conflict(clause: str, expected: str) -> None:
    t = one(f"CREATE TABLE t (k INT PRIMARY KEY, v INT) {clause}", CreateTable)
    assert t.on_conflict == expected and not t.append_only


def test_table_with_options_watermark_and_format() -> None:
    t = one(
        """CREATE TABLE t (
            k INT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND, PRIMARY KEY (k)
        ) APPEND ONLY
        WITH (connector = 'kafka', Topic = 'x', properties.bootstrap.server = 'b:9092',
              scan.startup.mode = earliest, retries = -3, ratio = 1.5, "Quoted.Key" = true)
        FORMAT PLAIN ENCODE JSON (schema.registry = 'http://r')""",
        CreateTable,
    )
    assert t.append_only and t.primary_key == ["k"]
    assert t.with_options == {
        "connector": "kafka",
        "topic": "x",
        "properties.bootstrap.server": "b:9092",
        "scan.startup.mode": "earliest",
        "retries": "-3",
        "ratio": "1.5",
        "Quoted.Key": "true",
    }
    assert t.format_encode == FormatEncode("plain", "json", {"schema.registry": "http://r"})
    [(column, expr)] = t.watermarks
    assert column == "ts"
    assert isinstance(expr, exp.Sub) and expr.this == exp.column("ts")
    assert expr.expression.args["unit"].name.upper() == "SECOND"


def test_row_format_and_clause_order() -> None:
    t = one("CREATE TABLE t (a INT) WITH (connector = 'x') ROW FORMAT JSON APPEND ONLY", CreateTable)
    assert t.row_format == "json" and t.append_only and t.format_encode is None


def test_create_table_as() -> None:
    t = one("CREATE TABLE t2 AS SELECT a, b + 1 AS c FROM t WHERE a > 0", CreateTable)
    assert t.columns == [] and isinstance(t.as_query, exp.Select)
    assert t.as_query_text == "SELECT a, b + 1 AS c FROM t WHERE a > 0"
    t = one("CREATE TABLE t2 WITH (connector = 'x') AS VALUES (1), (2)", CreateTable)
    assert isinstance(t.as_query, exp.Values) and t.with_options == {"connector": "x"}


def test_table_without_columns_takes_options() -> None:
    t = one("CREATE TABLE t WITH (connector = 'kafka') FORMAT UPSERT ENCODE AVRO", CreateTable)
    assert t.columns == [] and t.format_encode == FormatEncode("upsert", "avro")


def test_empty_column_list() -> None:
    assert one("CREATE TABLE t ()", CreateTable).columns == []


_ERRORS_BY_SQLSTATE: dict[str, type[PiestreamError]] = {
    "42601": SyntaxError_,
    "0A000": FeatureNotSupported,
    "42704": PiestreamError,
}


@pytest.mark.parametrize(
    ("sql", "sqlstate", "message", "position"),
    [
        ("CREATE TABLE t (a foo)", "42704", 'type "foo" does not exist', 19),
        ("CREATE TABLE t (a uuid)", "0A000", "type uuid is not supported", 19),
        ("CREATE TABLE t (a json)", "0A000", "type json is not supported", 19),
        ("CREATE TABLE t (a int, b)", "42601", 'syntax error at or near ")"', 25),
        ("CREATE TABLE t (a int,,)", "42601", 'syntax error at or near ","', 23),  # one is fine
        ("CREATE TABLE t", "42601", "syntax error at end of input", 15),
        ("CREATE TABLE t (a int", "42601", "syntax error at end of input", 22),
        ("CREATE TABLE (a int)", "42601", 'syntax error at or near "("', 14),
        ("CREATE TABLE t (a int) WITH (x = 1, x = 2)", "42601", 'option "x" specified more than once', 37),
        ("CREATE TABLE t (a int) WITH (x 1)", "42601", 'syntax error at or near "1"', 32),
        ("CREATE TABLE t (a int) WITH x = 1", "42601", 'syntax error at or near "x"', 29),
        ("CREATE TABLE t (a int) APPEND ONLY APPEND ONLY", "42601", 'syntax error at or near "APPEND"', 36),
        ("CREATE TABLE t (a int) ON CONFLICT DO SOMETHING", "42601", 'syntax error at or near "DO"', 36),
        ("CREATE TABLE t (a int) FORMAT PLAIN", "42601", "syntax error at end of input", 36),
        ("CREATE TABLE t (a int, CHECK (a > 0))", "0A000", "CHECK constraint is not supported", 24),
        ("CREATE TABLE t (a int UNIQUE)", "0A000", "UNIQUE column constraint is not supported", 23),
        ("CREATE TABLE t (a int REFERENCES u)", "0A000", "REFERENCES column constraint is not supported", 23),
        ("CREATE TEMP SOURCE s (a int)", "0A000", "CREATE TEMP SOURCE is not supported", 1),
        ("CREATE UNLOGGED TABLE t (a int)", "0A000", "CREATE UNLOGGED is not supported", 1),
        ("CREATE TABLE t (a int) INCLUDE foo AS k", "0A000", "INCLUDE FOO is not supported", 24),
    ],
)
def test_create_table_errors(sql: str, sqlstate: str, message: str, position: int) -> None:
    err = fails(sql, _ERRORS_BY_SQLSTATE[sqlstate])
    assert (err.sqlstate, err.message, err.position) == (sqlstate, message, position)


# ---------------------------------------------------------------------------------------------
# Other DDL
# ---------------------------------------------------------------------------------------------


def test_create_source_forms() -> None:
    s = one(
        "CREATE SOURCE IF NOT EXISTS s (v INT, PRIMARY KEY (v)) WITH (connector = 'datagen', "
        "fields.v.kind = 'sequence') FORMAT PLAIN ENCODE JSON",
        CreateSource,
    )
    assert s.if_not_exists and s.primary_key == ["v"] and s.columns == [ColumnDef("v", INT)]
    assert s.with_options == {"connector": "datagen", "fields.v.kind": "sequence"}
    assert s.format_encode == FormatEncode("plain", "json")
    s = one(
        "CREATE SOURCE s WITH (connector = 'kafka') FORMAT PLAIN ENCODE AVRO (schema.registry = 'r')",
        CreateSource,
    )
    assert s.columns == [] and s.format_encode == FormatEncode("plain", "avro", {"schema.registry": "r"})
    # APPEND ONLY is a table clause
    assert fails("CREATE SOURCE s (a INT) APPEND ONLY").position == 25


def test_create_materialized_view() -> None:
    sql = (
        "CREATE MATERIALIZED VIEW IF NOT EXISTS mv AS\n"
        "  SELECT a, count(*) AS n  -- per a\n"
        "  FROM t GROUP BY a;"
    )
    mv = one(sql, CreateMaterializedView)
    assert mv.name == "mv" and mv.if_not_exists and mv.columns is None
    assert isinstance(mv.query, exp.Select) and mv.query.args["group"] is not None
    assert mv.sql_text == "SELECT a, count(*) AS n  -- per a\n  FROM t GROUP BY a"
    assert mv.text == sql.rstrip(";")
    mv = one(
        "CREATE MATERIALIZED VIEW mv (x, y) WITH (streaming_parallelism = 2) AS VALUES (1, 2)",
        CreateMaterializedView,
    )
    assert mv.columns == ["x", "y"] and mv.with_options == {"streaming_parallelism": "2"}
    assert isinstance(mv.query, exp.Values) and mv.sql_text == "VALUES (1, 2)"


def test_create_view() -> None:
    v = one("CREATE OR REPLACE VIEW v (a, b) AS SELECT 1, 2 UNION ALL SELECT 3, 4", CreateView)
    assert v.or_replace and v.columns == ["a", "b"] and isinstance(v.query, exp.Union)
    assert v.sql_text == "SELECT 1, 2 UNION ALL SELECT 3, 4"
    assert one("CREATE VIEW IF NOT EXISTS v AS TABLE t", CreateView).if_not_exists


def test_create_index() -> None:
    i = one(
        'CREATE INDEX IF NOT EXISTS idx ON s.t (a DESC, "B" ASC NULLS LAST, c) '
        "INCLUDE (d, e) DISTRIBUTED BY (a)",
        CreateIndex,
    )
    assert i.name == "idx" and i.table.qualified == "s.t" and i.if_not_exists
    assert i.columns == [IndexColumn("a", True), IndexColumn("B", False), IndexColumn("c")]
    assert i.include == ["d", "e"] and i.distributed_by == ["a"]
    assert (
        fails("CREATE INDEX i ON t (a + 1)", FeatureNotSupported).message
        == "index on an expression is not supported"
    )
    assert fails("CREATE UNIQUE INDEX i ON t (a)", FeatureNotSupported).position == 1


def test_create_sink() -> None:
    s = one("CREATE SINK s FROM mv WITH (connector = 'blackhole')", CreateSink)
    assert (s.from_relation, s.query, s.with_options) == ("mv", None, {"connector": "blackhole"})
    s = one(
        "CREATE SINK IF NOT EXISTS s AS SELECT a, b FROM t WHERE a > 1 "
        "WITH (connector = 'kafka', type = 'append-only', force_append_only = 'true') "
        "FORMAT PLAIN ENCODE JSON",
        CreateSink,
    )
    assert s.if_not_exists and s.from_relation is None and isinstance(s.query, exp.Select)
    assert s.sql_text == "SELECT a, b FROM t WHERE a > 1"
    assert s.with_options == {"connector": "kafka", "type": "append-only", "force_append_only": "true"}
    assert s.format_encode == FormatEncode("plain", "json")
    s = one("CREATE SINK s INTO t FROM mv", CreateSink)
    assert s.into_table == "t" and s.from_relation == "mv"
    assert fails("CREATE SINK s WITH (connector = 'x')").message == 'syntax error at or near "WITH"'


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("DROP TABLE t", Drop("table", ["t"])),
        (
            'DROP TABLE IF EXISTS a, B, public."C" CASCADE',
            Drop("table", ["a", "b", ObjectName("C", "public")], True, True),
        ),
        ("DROP MATERIALIZED VIEW mv RESTRICT", Drop("materialized view", ["mv"])),
        ("DROP VIEW v", Drop("view", ["v"])),
        ("DROP INDEX IF EXISTS i", Drop("index", ["i"], if_exists=True)),
        ("DROP SOURCE s CASCADE", Drop("source", ["s"], cascade=True)),
        ("DROP SINK s", Drop("sink", ["s"])),
    ],
)
def test_drop(sql: str, expected: Drop) -> None:
    assert parse_one(sql) == expected


def test_create_and_drop_function() -> None:
    f = one("CREATE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql", CreateFunction)
    assert (f.name, f.args, f.return_type, f.language, f.body) == ("f", [], INT, "sql", "select 1")
    f = one(
        "CREATE OR REPLACE FUNCTION Cc(S varchar, int) RETURNS bigint LANGUAGE Python IMMUTABLE STRICT "
        "WITH (vectorized = true) AS $body$ def cc(s, n): ... $body$",
        CreateFunction,
    )
    assert f.or_replace and f.strict and f.with_options == {"vectorized": "true"}
    assert (f.name, f.args, f.language) == ("cc", [FunctionArg("s", VARCHAR), FunctionArg("", INT)], "python")
    assert f.body == " def cc(s, n): ... "
    f = one("CREATE FUNCTION g(x int) RETURNS int LANGUAGE sql RETURN x + 1", CreateFunction)
    assert f.body == "SELECT x + 1"
    d = one("DROP FUNCTION IF EXISTS f(int, varchar), g CASCADE", DropFunction)
    assert d == DropFunction([("f", [INT, VARCHAR]), ("g", None)], if_exists=True, cascade=True)
    for sql, what in [
        ("CREATE FUNCTION f(OUT x int) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$", "OUT arguments"),
        ("CREATE FUNCTION f() RETURNS TABLE (x int) LANGUAGE sql AS $$ SELECT 1 $$", "RETURNS TABLE"),
        (
            "CREATE FUNCTION f(x int DEFAULT 1) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
            "argument defaults",
        ),
    ]:
        assert fails(sql, FeatureNotSupported).message == f"{what} is not supported"
    err = fails("CREATE FUNCTION f() RETURNS int AS $$ SELECT 1 $$", PiestreamError)
    assert (err.sqlstate, err.message) == ("42P13", "no language specified")
    assert fails("CREATE FUNCTION f() RETURNS int LANGUAGE sql LANGUAGE sql AS 'x'").sqlstate == "42601"


def test_unsupported_objects() -> None:
    for sql, message in [
        ("CREATE TRIGGER trg AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()", "CREATE TRIGGER"),
        ("CREATE AGGREGATE a (int) (sfunc = f, stype = int)", "CREATE AGGREGATE"),
        ("CREATE OR REPLACE TABLE t (a int)", "CREATE OR REPLACE TABLE"),
        ("CREATE OR REPLACE MATERIALIZED VIEW mv AS SELECT 1", "CREATE OR REPLACE MATERIALIZED VIEW"),
        ("DROP AGGREGATE a", "DROP AGGREGATE"),
    ]:
        err = fails(sql, FeatureNotSupported)
        assert (err.sqlstate, err.message, err.position) == ("0A000", f"{message} is not supported", 1)
    assert fails("CREATE WIDGET w").message == 'syntax error at or near "WIDGET"'
    err = fails("CREATE SCHEMA s AUTHORIZATION u", FeatureNotSupported)
    assert (err.message, err.position) == ("CREATE SCHEMA ... AUTHORIZATION is not supported", 17)
    assert one("CREATE SCHEMA IF NOT EXISTS S", CreateSchema) == CreateSchema("s", True)
    assert one("CREATE TEMP TABLE t (a int)", CreateTable).temporary
    assert one("CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1", CreateView).temporary
    assert one('DROP SCHEMA IF EXISTS a, "B" CASCADE', DropSchema) == DropSchema(["a", "B"], True, True)
    assert fails("DROP WIDGET w").position == 6


# ---------------------------------------------------------------------------------------------
# DML
# ---------------------------------------------------------------------------------------------


def test_insert() -> None:
    i = one("INSERT INTO T (A, \"b\") VALUES (1, 'x'), (2, DEFAULT) RETURNING a, b + 1 AS c", Insert)
    assert i.table == "t" and i.columns == ["a", "b"]
    assert isinstance(i.source, exp.Values) and len(i.source.expressions) == 2
    assert [type(e) for e in i.returning] == [exp.Column, exp.Alias]
    i = one("INSERT INTO s.t SELECT * FROM u WHERE x > 1", Insert)
    assert (
        i.table.qualified == "s.t"
        and i.columns is None
        and isinstance(i.source, exp.Select)
        and i.returning == []
    )
    i = one("INSERT INTO t (SELECT 1 UNION SELECT 2)", Insert)
    assert i.columns is None and isinstance(i.source, exp.Union)
    assert isinstance(
        one("INSERT INTO t (a) WITH x AS (SELECT 1) SELECT * FROM x", Insert).source, exp.Select
    )
    d = one("INSERT INTO t DEFAULT VALUES", Insert)  # one row of every column's DEFAULT
    assert d.columns is None and d.source == exp.Values(expressions=[exp.Tuple(expressions=[])])
    assert fails("INSERT INTO t (a) DEFAULT VALUES").message == 'syntax error at or near "DEFAULT"'
    assert fails("INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING", FeatureNotSupported).position == 26
    assert fails("INSERT t VALUES (1)").message == 'syntax error at or near "t"'


def test_update() -> None:
    u = one("UPDATE t SET a = a + 1, \"B\" = 'z' WHERE a > 1 RETURNING *", Update)
    assert u.table == "t" and u.alias is None
    assert [a.column for a in u.assignments] == ["a", "B"]
    column, value = u.assignments[0]
    assert column == "a" and isinstance(value, exp.Add)
    assert isinstance(u.where, exp.GT) and isinstance(u.returning[0], exp.Star)
    u = one("UPDATE t AS x SET v = NULL", Update)
    assert u.alias == "x" and u.where is None and isinstance(u.assignments[0].value, exp.Null)
    assert fails("UPDATE t SET a = 1 FROM u", FeatureNotSupported).position == 20
    assert fails("UPDATE t SET (a, b) = (1, 2)", FeatureNotSupported).position == 14
    assert fails("UPDATE t SET a 1").message == 'syntax error at or near "1"'


def test_delete() -> None:
    d = one("DELETE FROM t WHERE a = 1 AND b IN (SELECT b FROM u)", Delete)
    assert d.table == "t" and isinstance(d.where, exp.And) and d.returning == []
    d = one("DELETE FROM t x RETURNING x.a", Delete)
    assert d.alias == "x" and d.where is None and d.returning[0] == exp.column("a", "x")
    assert fails("DELETE FROM t USING u", FeatureNotSupported).position == 15


# ---------------------------------------------------------------------------------------------
# Utility statements
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("FLUSH", Flush()),
        ("flush;", Flush()),
        ("SET x = 1", SetVariable("x", "1")),
        ("SET x TO -1.5", SetVariable("x", "-1.5")),
        ("SET SESSION RW_Implicit_Flush = true", SetVariable("rw_implicit_flush", "true")),
        ("SET LOCAL x TO DEFAULT", SetVariable("x", None, local=True)),
        ("SET x = on", SetVariable("x", "on")),
        ("SET application_name = 'psql'", SetVariable("application_name", "psql")),
        ("SET DateStyle = ISO, MDY", SetVariable("datestyle", "iso, mdy")),
        ('SET search_path TO public, "$user"', SetVariable("search_path", 'public, "$user"')),
        ("SET TIME ZONE 'UTC'", SetVariable("timezone", "UTC")),
        ("SET TIME ZONE LOCAL", SetVariable("timezone", None)),
        ("SET streaming.parallelism = 4", SetVariable("streaming.parallelism", "4")),
        ("RESET x", SetVariable("x", None)),
        ("RESET TIME ZONE", SetVariable("timezone", None)),
        ("RESET ALL", ResetAll()),
        ("DISCARD ALL", Discard("all")),
        ("DISCARD TEMPORARY", Discard("temp")),
        ("SHOW ALL", ShowVariable("all")),
        ("SHOW server_version", ShowVariable("server_version")),
        ('SHOW "DateStyle"', ShowVariable("datestyle")),
        ("SHOW TIME ZONE", ShowVariable("timezone")),
        ("SHOW TRANSACTION ISOLATION LEVEL", ShowVariable("transaction_isolation")),
        ("SHOW TABLES", ShowObjects("tables")),
        ("SHOW TABLES FROM public LIKE 'b%'", ShowObjects("tables", "public", "b%")),
        ("SHOW MATERIALIZED VIEWS", ShowObjects("materialized views")),
        ("SHOW VIEWS IN s", ShowObjects("views", "s")),
        ("SHOW SOURCES", ShowObjects("sources")),
        ("SHOW SINKS", ShowObjects("sinks")),
        ("SHOW INDEXES FROM t", ShowObjects("indexes", "t")),
        ("SHOW COLUMNS FROM T", ShowObjects("columns", "t")),
        ("SHOW SCHEMAS", ShowObjects("schemas")),
        ("SHOW DATABASES", ShowObjects("databases")),
        ("SHOW PARAMETERS", ShowObjects("parameters")),
        ("SHOW CREATE TABLE t", ShowCreate("table", "t")),
        (
            "SHOW CREATE MATERIALIZED VIEW public.mv",
            ShowCreate("materialized view", ObjectName("mv", "public")),
        ),
        ("SHOW CREATE SINK s", ShowCreate("sink", "s")),
        ("DESCRIBE t", Describe("t")),
        ("DESC public.T", Describe(ObjectName("t", "public"))),
        ("BEGIN", Begin()),
        ("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE", Begin(["isolation level serializable"])),
        ("BEGIN WORK READ ONLY, NOT DEFERRABLE", Begin(["read only", "not deferrable"])),
        ("START TRANSACTION READ WRITE", Begin(["read write"])),
        ("COMMIT", Commit()),
        ("COMMIT WORK", Commit()),
        ("END TRANSACTION", Commit()),
        ("ROLLBACK", Rollback()),
        ("ABORT", Rollback()),
    ],
)
def test_utility_statements(sql: str, expected: Statement) -> None:
    stmt = parse_one(sql)
    assert stmt == expected
    assert stmt.text == sql.rstrip(";")


def test_explain() -> None:
    e = one("EXPLAIN SELECT 1", Explain)
    assert isinstance(e.statement, Query) and not e.verbose and not e.analyze
    assert e.statement.text == "SELECT 1"
    e = one("EXPLAIN VERBOSE CREATE MATERIALIZED VIEW mv AS SELECT a FROM t", Explain)
    assert e.verbose and isinstance(e.statement, CreateMaterializedView)
    assert e.statement.sql_text == "SELECT a FROM t"
    assert e.statement.text == "CREATE MATERIALIZED VIEW mv AS SELECT a FROM t"
    e = one("EXPLAIN ANALYZE VERBOSE INSERT INTO t VALUES (1)", Explain)
    assert e.analyze and e.verbose and isinstance(e.statement, Insert)
    e = one("EXPLAIN (VERBOSE, TRACE, TYPE physical, analyze false) CREATE TABLE t (a INT)", Explain)
    assert e.verbose and not e.analyze and e.options == {"trace": "true", "type": "physical"}
    assert isinstance(e.statement, CreateTable)
    e = one("EXPLAIN (SELECT 1) UNION (SELECT 2)", Explain)
    assert isinstance(e.statement, Query) and isinstance(e.statement.query, exp.Union)
    for stmt in ("CREATE SINK s FROM mv", "CREATE INDEX i ON t (a)", "UPDATE t SET a = 1", "DELETE FROM t"):
        assert parse_one(f"EXPLAIN {stmt}").statement.text == stmt  # type: ignore[attr-defined]
    assert fails("EXPLAIN FLUSH").message == 'syntax error at or near "FLUSH"'
    assert fails("EXPLAIN").message == "syntax error at end of input"


def test_transaction_statements() -> None:
    assert parse_one("ROLLBACK TO SAVEPOINT a") == RollbackToSavepoint("a")
    assert parse_one("ROLLBACK WORK TO b") == RollbackToSavepoint("b")
    assert parse_one("SAVEPOINT sa_savepoint_1") == Savepoint("sa_savepoint_1")
    assert parse_one('RELEASE SAVEPOINT "Mixed"') == ReleaseSavepoint("Mixed")
    assert parse_one("RELEASE a") == ReleaseSavepoint("a")
    assert parse_one("SET TRANSACTION READ ONLY") == SetTransaction(["read only"])
    assert parse_one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE") == SetTransaction(
        ["isolation level serializable", "read write"]
    )
    assert fails("SET SESSION TRANSACTION READ ONLY", FeatureNotSupported).position == 13
    assert fails("SAVEPOINT").message == "syntax error at end of input"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("GRANT r TO u", "GRANT / REVOKE of role membership"),
        ("REVOKE GRANT OPTION FOR SELECT ON t FROM u", "REVOKE GRANT OPTION FOR"),
        ("ALTER TABLE t ALTER COLUMN c TYPE bigint", "this form of ALTER TABLE"),
        ("ALTER TABLE t ADD CONSTRAINT c UNIQUE (a)", "ALTER TABLE ... ADD CONSTRAINT"),
        ("ALTER SOURCE s SET backfill_rate_limit = 2", "ALTER SOURCE ... SET backfill_rate_limit"),
        ("ALTER SYSTEM RESET x", "ALTER SYSTEM RESET"),
        ("ALTER MATERIALIZED VIEW m SET SCHEMA s", "this form of ALTER MATERIALIZED VIEW"),
        ("ALTER FUNCTION f RENAME TO g", "ALTER FUNCTION"),
        ("TRUNCATE t RESTART IDENTITY", "TRUNCATE ... RESTART"),
        ("VACUUM", "VACUUM"),
        ("ANALYZE t", "ANALYZE"),
        ("DO $$ BEGIN END $$", "DO"),
        ("PREPARE p AS SELECT 1", "PREPARE"),
        ("EXECUTE p", "EXECUTE"),
        ("LISTEN ch", "LISTEN"),
        ("COMMENT ON FUNCTION f IS 'x'", "COMMENT ON FUNCTION"),
        ("CALL p()", "CALL"),
    ],
)
def test_unsupported_statements(sql: str, message: str) -> None:
    err = fails(sql, FeatureNotSupported)
    assert (err.sqlstate, err.message, err.position) == ("0A000", f"{message} is not supported", 1)


def test_lock_table() -> None:
    stmt = parse_one("LOCK TABLE public.t IN ACCESS SHARE MODE")
    assert isinstance(stmt, ast.LockTable) and stmt.mode == "ACCESS SHARE" and not stmt.nowait
    assert [object_name(n).qualified for n in stmt.names] == ["public.t"]
    assert parse_one("LOCK a, ONLY b") == ast.LockTable(("a", "b"), "ACCESS EXCLUSIVE")
    assert parse_one("LOCK TABLE ONLY t * IN SHARE ROW EXCLUSIVE MODE NOWAIT") == ast.LockTable(
        ("t",), "SHARE ROW EXCLUSIVE", nowait=True
    )
    fails("LOCK TABLE t IN SHARED MODE", SyntaxError_)
    fails("LOCK TABLE t IN ACCESS SHARE", SyntaxError_)


def test_copy_subscription_and_cursor_statements() -> None:
    assert parse_one(
        "COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'x')"
    ) == ast.Copy(
        "t", ["a", "b"], None, False, {"format": "csv", "header": "true", "delimiter": ";", "null": "x"}
    )
    assert parse_one("copy t from stdin csv header delimiter as '|'") == ast.Copy(
        "t", [], None, False, {"format": "csv", "header": "true", "delimiter": "|"}
    )
    to = parse_one("COPY (SELECT 1) TO STDOUT")
    assert isinstance(to, ast.Copy) and to.to_client and to.query is not None
    err = fails("COPY t FROM '/tmp/f.csv'", FeatureNotSupported)
    assert (err.message, err.position) == (
        "COPY FROM a file or program (use psql's \\copy) is not supported",
        13,
    )
    assert parse_one("CREATE SUBSCRIPTION s FROM mv WITH (retention = '1h')") == ast.CreateSubscription(
        "s", "mv", {"retention": "1h"}
    )
    assert parse_one("DECLARE c SUBSCRIPTION CURSOR FOR s SINCE begin()") == ast.DeclareSubscriptionCursor(
        "c", "s", "begin"
    )
    assert parse_one("DECLARE c SUBSCRIPTION CURSOR FOR s SINCE 1711527245871").since == "1711527245871"
    assert parse_one("DECLARE c SUBSCRIPTION CURSOR FOR s FULL").since == "full"
    assert parse_one("FETCH NEXT FROM c") == ast.Fetch("c", 1)
    assert parse_one("FETCH 10 FROM c WITH (timeout = '1s')") == ast.Fetch("c", 10, {"timeout": "1s"})
    assert parse_one("CLOSE ALL") == ast.CloseCursor(None)
    assert parse_one("DROP SUBSCRIPTION IF EXISTS s") == ast.Drop("subscription", ["s"], if_exists=True)
    d = parse_one("DECLARE c BINARY NO SCROLL CURSOR WITH HOLD FOR SELECT 1")
    assert isinstance(d, ast.DeclareCursor) and (d.name, d.binary, d.hold) == ("c", True, True)
    assert parse_one('DECLARE "x" CURSOR WITHOUT HOLD FOR SELECT 1').hold is False
    assert fails("DECLARE c SCROLL CURSOR FOR SELECT 1", FeatureNotSupported).message == (
        "SCROLL cursors (FETCH BACKWARD) is not supported"
    )
    assert parse_one("FETCH FORWARD ALL IN c") == ast.Fetch("c", all=True)
    assert parse_one("FETCH FORWARD 2000 FROM c") == ast.Fetch("c", 2000)
    assert parse_one("MOVE 5 IN c") == ast.Fetch("c", 5, move=True)
    assert parse_one("MOVE ALL FROM c") == ast.Fetch("c", all=True, move=True)
    assert fails("FETCH PRIOR FROM c", FeatureNotSupported).message == "FETCH PRIOR is not supported"


# ---------------------------------------------------------------------------------------------
# Scripts
# ---------------------------------------------------------------------------------------------


def test_script_with_comments_and_empty_statements() -> None:
    sql = """
    -- set up
    CREATE TABLE t (a INT);;   /* block
    comment */ ;
    INSERT INTO t VALUES (1); -- trailing comment
    FLUSH;
    SELECT a FROM t /* inline */ WHERE a > 0;
    -- done
    """
    stmts = parse(sql)
    assert [type(s) for s in stmts] == [CreateTable, Insert, Flush, Query]
    assert [s.text for s in stmts] == [
        "CREATE TABLE t (a INT)",
        "INSERT INTO t VALUES (1)",
        "FLUSH",
        "SELECT a FROM t /* inline */ WHERE a > 0",
    ]
    assert parse("") == [] and parse(" ;; -- nothing\n") == []


def test_statement_text_survives_keywords_as_identifiers() -> None:
    # words that are statements or clauses elsewhere are ordinary identifiers in queries
    q = query_of("SELECT flush, explain, source, sink, watermark, emit, reset, append FROM show_me")
    assert [c.name for c in q.find_all(exp.Column)] == [
        "flush",
        "explain",
        "source",
        "sink",
        "watermark",
        "emit",
        "reset",
        "append",
    ]
    t = one("CREATE TABLE source (sink INT, watermark INT, append INT)", CreateTable)
    assert t.name == "source" and [c.name for c in t.columns] == ["sink", "watermark", "append"]


def test_parse_one_rejects_scripts() -> None:
    err = fails_one("SELECT 1; SELECT 1")
    assert err.message == "cannot insert multiple commands into a prepared statement" and err.position == 11
    assert fails_one("  ").message == "syntax error at end of input"
    assert isinstance(parse_one("SELECT 1;"), Query)


def fails_one(sql: str) -> PiestreamError:
    with pytest.raises(SyntaxError_) as info:
        parse_one(sql)
    return info.value


def test_positions_are_offsets_in_the_whole_script() -> None:
    sql = "SELECT 1;\nSELECT a FROM t"
    q = parse(sql)[1]
    assert isinstance(q, Query)
    column = q.query.find(exp.Column)
    assert column is not None and column.this.meta["start"] == sql.index("a FROM")


# ---------------------------------------------------------------------------------------------
# Queries the binder consumes
# ---------------------------------------------------------------------------------------------

NEXMARK_QUERIES = {
    "q0": "SELECT auction, bidder, price, date_time FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, date_time FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction = 1007 OR auction = 1020 OR auction = 2001 "
    "OR auction = 2019 OR auction = 2087",
    "q3": "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id "
    "WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')",
    "q4": "SELECT Q.category, AVG(Q.final) AS avg FROM (SELECT MAX(B.price) AS final, A.category "
    "FROM auction A, bid B WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires "
    "GROUP BY A.id, A.category) Q GROUP BY Q.category",
    "q5": "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT bid.auction, count(*) AS num, "
    "window_start AS starttime FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) "
    "GROUP BY window_start, bid.auction) AS AuctionBids JOIN (SELECT max(CountBids.num) AS maxn, "
    "CountBids.starttime_c FROM (SELECT count(*) AS num, window_start AS starttime_c "
    "FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY bid.auction, window_start) "
    "AS CountBids GROUP BY CountBids.starttime_c) AS MaxBids ON AuctionBids.starttime = MaxBids.starttime_c "
    "AND AuctionBids.num >= MaxBids.maxn",
    "q6": "SELECT Q.seller, AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time "
    "ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg FROM (SELECT *, ROW_NUMBER() OVER "
    "(PARTITION BY A.id, A.seller ORDER BY B.price DESC) AS rownum FROM auction A, bid B "
    "WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) Q WHERE Q.rownum <= 1",
    "q7": "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B JOIN (SELECT MAX(price) AS maxprice, "
    "window_end AS date_time FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND) GROUP BY window_end) B1 "
    "ON B.price = B1.maxprice WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time",
    "q8": "SELECT P.id, P.name, P.starttime FROM (SELECT id, name, window_start AS starttime, "
    "window_end AS endtime FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) "
    "GROUP BY id, name, window_start, window_end) P JOIN (SELECT seller, window_start AS starttime, "
    "window_end AS endtime FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) "
    "GROUP BY seller, window_start, window_end) A ON P.id = A.seller AND P.starttime = A.starttime "
    "AND P.endtime = A.endtime",
    "q9": "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, "
    "auction, bidder, price, bid_date_time FROM (SELECT A.*, B.auction, B.bidder, B.price, "
    "B.date_time AS bid_date_time, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, "
    "B.date_time ASC) AS rownum FROM auction A, bid B WHERE A.id = B.auction "
    "AND B.date_time BETWEEN A.date_time AND A.expires) WHERE rownum <= 1",
    "q10": "SELECT auction, bidder, price, date_time, TO_CHAR(date_time, 'YYYY-MM-DD') AS date, "
    "TO_CHAR(date_time, 'HH:MI') AS time FROM bid",
    "q14": "SELECT auction, bidder, 0.908 * price AS price, CASE WHEN extract(hour FROM date_time) >= 8 "
    "AND extract(hour FROM date_time) <= 18 THEN 'dayTime' WHEN extract(hour FROM date_time) <= 6 "
    "OR extract(hour FROM date_time) >= 20 THEN 'nightTime' ELSE 'otherTime' END AS bidTimeType, "
    "date_time, extra, count_char(extra, 'c') AS c_counts FROM bid "
    "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
    "q15": "SELECT to_char(date_time, 'yyyy-mm-dd') AS day, count(*) AS total_bids, "
    "count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
    "count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids, "
    "count(DISTINCT bidder) AS total_bidders, "
    "count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders, "
    "count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions "
    "FROM bid GROUP BY to_char(date_time, 'yyyy-mm-dd')",
    "q16": "SELECT channel, to_char(date_time, 'yyyy-mm-dd') AS day, "
    "max(to_char(date_time, 'HH:mm')) AS minute, "
    "count(*) AS total_bids, count(*) FILTER (WHERE price < 10000) AS rank1_bids, "
    "count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders "
    "FROM bid GROUP BY channel, to_char(date_time, 'yyyy-mm-dd')",
    "q17": "SELECT auction, to_char(date_time, 'YYYY-MM-DD') AS day, count(*) AS total_bids, "
    "count(*) FILTER (WHERE price < 10000) AS rank1_bids, min(price) AS min_price, "
    "max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price "
    "FROM bid GROUP BY auction, to_char(date_time, 'YYYY-MM-DD')",
    "q18": "SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, ROW_NUMBER() OVER "
    "(PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) "
    "WHERE rank_number <= 1",
    "q19": "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) "
    "AS rank_number FROM bid) WHERE rank_number <= 10",
    "q20": "SELECT auction, bidder, price, channel, url, B.date_time AS bid_date_time, B.extra AS bid_extra, "
    "item_name, description, initial_bid, reserve, A.date_time AS auction_date_time, expires, seller, "
    "category, A.extra AS auction_extra FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id "
    "WHERE A.category = 10",
    "q21": "SELECT auction, bidder, price, channel, CASE WHEN lower(channel) = 'apple' THEN '0' "
    "WHEN lower(channel) = 'google' THEN '1' WHEN lower(channel) = 'facebook' THEN '2' "
    "WHEN lower(channel) = 'baidu' THEN '3' ELSE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] END "
    "AS channel_id FROM bid WHERE (regexp_match(url, '(&|^)channel_id=([^&]*)'))[2] IS NOT NULL "
    "OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
    "q22": "SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1, "
    "split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3 FROM bid",
    "q101": "SELECT a.id AS auction_id, a.item_name AS auction_item_name, b.max_price AS current_highest_bid "
    "FROM auction a LEFT OUTER JOIN (SELECT b1.auction, MAX(b1.price) max_price FROM bid b1 "
    "GROUP BY b1.auction) b ON a.id = b.auction",
    "q102": "SELECT a.id AS auction_id, a.item_name AS auction_item_name, COUNT(b.auction) AS bid_count "
    "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.item_name "
    "HAVING COUNT(b.auction) >= (SELECT COUNT(*) / COUNT(DISTINCT auction) FROM bid)",
    "q103": "SELECT a.id AS auction_id, a.item_name AS auction_item_name FROM auction a WHERE a.id IN "
    "(SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) >= 20)",
    "q104": "SELECT a.id AS auction_id, a.item_name AS auction_item_name FROM auction a WHERE a.id NOT IN "
    "(SELECT b.auction FROM bid b GROUP BY b.auction HAVING COUNT(*) < 20)",
    "q105": "SELECT a.id AS auction_id, a.item_name AS auction_item_name, COUNT(b.auction) AS bid_count "
    "FROM auction a JOIN bid b ON a.id = b.auction GROUP BY a.id, a.item_name "
    "ORDER BY bid_count DESC LIMIT 1000",
    "q106": "SELECT MIN(final) AS min_final FROM (SELECT auction.id, MAX(price) AS final FROM auction, bid "
    "WHERE bid.auction = auction.id AND bid.date_time BETWEEN auction.date_time AND auction.expires "
    "GROUP BY auction.id)",
}


@pytest.mark.parametrize("name", sorted(NEXMARK_QUERIES))
def test_nexmark_queries_round_trip(name: str) -> None:
    sql = NEXMARK_QUERIES[name]
    query = query_of(sql)
    assert isinstance(query, exp.Select)
    regenerated = query.sql(dialect=Piestream)
    assert query_of(regenerated) == query
    # as an MV: the stored text is the query exactly as written
    mv = one(f"CREATE MATERIALIZED VIEW nexmark_{name} AS {sql}", CreateMaterializedView)
    assert mv.sql_text == sql and mv.query == query


def _functions(query: exp.Expression, name: str) -> list[exp.Expression]:
    return [f for f in query.find_all(exp.Anonymous) if f.name.lower() == name]


def test_nexmark_query_shapes() -> None:
    q = NEXMARK_QUERIES
    # identifiers are folded: P.name -> p.name
    q3 = query_of(q["q3"])
    assert {c.table for c in q3.find_all(exp.Column)} == {"p", "a"}
    assert isinstance(q3.args["joins"][0], exp.Join)
    # HOP / TUMBLE are table functions in FROM
    hops = [t.this for t in query_of(q["q5"]).find_all(exp.Table) if isinstance(t.this, exp.Anonymous)]
    assert [h.name.upper() for h in hops] == ["HOP", "HOP"]
    assert [type(a) for a in hops[0].expressions] == [exp.Column, exp.Column, exp.Interval, exp.Interval]
    tumble = query_of(q["q7"]).find(exp.Table, bfs=False)
    tumbles = [t.this for t in query_of(q["q7"]).find_all(exp.Table) if isinstance(t.this, exp.Anonymous)]
    assert tumble is not None and [t.name.upper() for t in tumbles] == ["TUMBLE"]
    # window functions
    q6 = query_of(q["q6"])
    windows = list(q6.find_all(exp.Window))
    assert len(windows) == 2
    spec = windows[0].args["spec"]
    assert spec.args["kind"] == "ROWS" and spec.args["start"] == exp.Literal.number(10)
    assert any(isinstance(w.this, exp.RowNumber) for w in windows)
    # TO_CHAR keeps PostgreSQL's format string (sqlglot would turn it into strftime)
    [to_date, to_time] = _functions(query_of(q["q10"]), "to_char")
    assert to_date.expressions[1] == exp.Literal.string("YYYY-MM-DD")
    assert to_time.expressions[1] == exp.Literal.string("HH:MI")
    # FILTER clauses wrap aggregates
    filters = list(query_of(q["q15"]).find_all(exp.Filter))
    assert len(filters) == 4 and all(isinstance(f.this, exp.Count) for f in filters)
    assert isinstance(filters[2].this.this, exp.Distinct)
    # regexp_match(...)[2]: the subscript is kept as written (1-based)
    brackets = list(query_of(q["q21"]).find_all(exp.Bracket))
    assert len(brackets) == 2
    for b in brackets:
        assert b.expressions == [exp.Literal.number(2)]
        assert isinstance(b.this, exp.Paren) and b.this.this.name == "regexp_match"
    assert isinstance(query_of(q["q21"]).find(exp.Case), exp.Case)
    # split_part
    parts = list(query_of(q["q22"]).find_all(exp.SplitPart))
    assert [p.args["part_index"].name for p in parts] == ["4", "5", "6"]
    # HAVING with a scalar subquery, IN / NOT IN subqueries
    having = query_of(q["q102"]).args["having"]
    assert isinstance(having.this, exp.GTE) and isinstance(having.this.expression, exp.Subquery)
    in_ = query_of(q["q103"]).args["where"].this
    assert isinstance(in_, exp.In) and isinstance(in_.args["query"], exp.Subquery)
    not_in = query_of(q["q104"]).args["where"].this
    assert isinstance(not_in, exp.Not) and isinstance(not_in.this, exp.In)
    q105 = query_of(q["q105"])
    assert q105.args["order"].expressions[0].args["desc"] and q105.args["limit"].expression.name == "1000"
    # a subquery in FROM without an alias (PostgreSQL 16)
    assert isinstance(query_of(q["q106"]).args["from_"].this, exp.Subquery)


@pytest.mark.parametrize(
    "sql",
    [
        "WITH x AS (SELECT a FROM t), y AS (SELECT a FROM x) SELECT * FROM y",
        "WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r",
        "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.a = t.a)",
        "SELECT a, (SELECT max(b) FROM u) AS m FROM t",
        "SELECT * FROM t LEFT JOIN u ON t.a = u.a FULL OUTER JOIN v USING (a) CROSS JOIN w",
        "SELECT a::BIGINT, CAST(b AS VARCHAR), c::INT[], d::STRUCT<x INT>, e::TIMESTAMPTZ FROM t",
        "SELECT $1, $2::INT FROM t WHERE a = $3",
        "SELECT ARRAY[1, 2, 3], (ARRAY[a, b])[1], arr[i], arr[1:2] FROM t",
        "SELECT (s).a, (s).b.c, (t.s).a FROM t",
        "SELECT sum(a) OVER w FROM t WINDOW w AS (PARTITION BY b ORDER BY c)",
        "SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b DESC NULLS LAST",
        "SELECT a FROM t UNION SELECT a FROM u INTERSECT SELECT a FROM v EXCEPT SELECT 1",
        "SELECT a FROM t ORDER BY a LIMIT 10 OFFSET 5",
        "SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 1",
        "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v (x, y)",
        "SELECT a BETWEEN 1 AND 2, b LIKE 'x%', c ILIKE 'y', d IS NOT NULL, e IS DISTINCT FROM f FROM t",
        "SELECT CASE a WHEN 1 THEN 'one' ELSE 'many' END, COALESCE(a, 0), NULLIF(a, b) FROM t",
        "SELECT string_agg(s, ',' ORDER BY s), array_agg(DISTINCT a) FROM t",
        "SELECT now(), current_date, INTERVAL '1 day', DATE '2024-01-01', TIMESTAMP '2024-01-01 00:00:00'",
        "SELECT a -> 'k', a ->> 'k' FROM t",
        "SELECT * FROM generate_series(1, 10) AS g (n)",
        "SELECT * FROM unnest(ARRAY[1, 2]) AS u",
        "SELECT lag(a, 1) OVER (ORDER BY b), rank() OVER (PARTITION BY c ORDER BY d) FROM t",
        "SELECT E'a\\nb', 'it''s', \"Quoted Col\" FROM t",
        "VALUES (1, 2), (3, 4)",
        "TABLE t",
        "(SELECT 1) UNION (SELECT 2)",
        "(SELECT a FROM t) ORDER BY a LIMIT 1",
    ],
)
def test_query_shapes_round_trip(sql: str) -> None:
    stmt = parse_one(sql)
    assert isinstance(stmt, Query) and stmt.text == sql
    assert not list(stmt.query.find_all(exp.Command))
    assert query_of(stmt.query.sql(dialect=Piestream)) == stmt.query


def test_query_tree_conventions() -> None:
    q = query_of('SELECT A, "B", T.C, (S).F FROM Tab AS T')
    assert [c.name for c in q.find_all(exp.Column)] == ["a", "B", "c", "s"]
    assert q.find(exp.Table).name == "tab" and q.find(exp.Dot).expression.name == "f"
    # subscripts exactly as written, literal or not
    q = query_of("SELECT a[1], a[i], ARRAY[1, 2][2] FROM t")
    assert [b.expressions[0].sql() for b in q.find_all(exp.Bracket)] == ["1", "i", "2"]
    # functions whose sqlglot builders rewrite their arguments stay PostgreSQL calls
    q = query_of(
        "SELECT to_char(d, 'YYYY'), to_timestamp('x', 'YYYY'), to_date('x', 'YYYY'), div(5, 2), "
        "array_prepend(1, a), regexp_replace(s, 'a', 'b', 'g'), lpad(s, 3), generate_series(1, 3, 2) FROM t"
    )
    names = [f.name.lower() for f in q.find_all(exp.Anonymous)]
    assert names == [
        "to_char",
        "to_timestamp",
        "to_date",
        "div",
        "array_prepend",
        "regexp_replace",
        "lpad",
        "generate_series",
    ]
    array_prepend = _functions(q, "array_prepend")[0]
    assert array_prepend.expressions == [exp.Literal.number(1), exp.column("a")]
    # a parameter is an exp.Parameter
    assert isinstance(query_of("SELECT $1").expressions[0], exp.Parameter)
    # a bare parenthesized query is unwrapped; one with ORDER BY stays a Subquery
    assert isinstance(query_of("((SELECT 1))"), exp.Select)
    assert isinstance(query_of("(SELECT 1) ORDER BY 1"), exp.Subquery)


def test_parameters_next_to_other_parameters_are_not_dollar_quotes() -> None:
    """`$1,$2` (psycopg writes parameters without spaces) is two parameters: a dollar-quote tag
    never starts with a digit. sqlglot alone reads a quote tagged `1,` and fails."""
    values = query_of("SELECT $1,$2,($3||$4)").expressions
    assert [type(e) for e in values] == [exp.Parameter, exp.Parameter, exp.Paren]
    n = 65535
    sql = "INSERT INTO t VALUES " + ",".join(f"(${i},${i + 1})" for i in range(1, n, 2))
    (stmt,) = parse(sql)  # the full tree (parse_one keeps such rows as a grid, tested below)
    assert isinstance(stmt, ast.Insert)
    params = [p for p in stmt.source.find_all(exp.Parameter)]
    assert len(params) == n - 1
    # dollar quotes still work beside parameters, with tags of letters, digits after the first
    q = query_of("SELECT $$a,$1$$, $t1$x$t1$, $1")
    assert [e.sql() for e in q.expressions][:2] == ["'a,$1'", "'x'"]
    assert isinstance(q.expressions[2], exp.Parameter)


def test_emit_on_window_close_outside_a_materialized_view_is_rejected() -> None:
    for sql, position in [
        ("SELECT window_start, count(*) FROM TUMBLE(t, ts, INTERVAL '1' MINUTE) GROUP BY window_start "
         "EMIT ON WINDOW CLOSE", 93),
        ("CREATE VIEW v AS SELECT a FROM t EMIT ON WINDOW CLOSE", 34),
        ("SELECT 1 EMIT ON WINDOW CLOSE", 10),
    ]:  # fmt: skip
        err = fails(sql, FeatureNotSupported)
        assert (err.message, err.position) == ("EMIT ON WINDOW CLOSE is not supported", position)


def test_create_materialized_view_emit_on_window_close() -> None:
    sql = (
        "CREATE MATERIALIZED VIEW mv AS SELECT window_start, count(*) "
        "FROM TUMBLE(t, ts, INTERVAL '1' MINUTE) GROUP BY window_start EMIT ON WINDOW CLOSE"
    )
    stmt = parse_one(sql)
    assert isinstance(stmt, ast.CreateMaterializedView) and stmt.emit_on_window_close
    assert stmt.sql_text.endswith("GROUP BY window_start")  # the query's text stops before EMIT
    assert stmt.text == sql  # the definition the catalog keeps (and re-plans from) has it
    plain = parse_one("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t")
    assert isinstance(plain, ast.CreateMaterializedView) and not plain.emit_on_window_close
    err = fails("CREATE MATERIALIZED VIEW mv AS SELECT a FROM t EMIT ON WINDOW", SyntaxError_)
    assert err.position is not None


def test_create_sink_emit_on_window_close_and_session_frames() -> None:
    sql = "CREATE SINK k AS SELECT a FROM t EMIT ON WINDOW CLOSE WITH (connector = 'blackhole')"
    stmt = parse_one(sql)
    assert isinstance(stmt, ast.CreateSink) and stmt.emit_on_window_close
    assert stmt.with_options == {"connector": "blackhole"} and stmt.text == sql
    plain = parse_one("CREATE SINK k AS SELECT a FROM t WITH (connector = 'blackhole')")
    assert isinstance(plain, ast.CreateSink) and not plain.emit_on_window_close
    # RisingWave's SESSION frame: a WindowSpec of kind SESSION holding the gap
    q = query_of(
        "SELECT first_value(ts) OVER (PARTITION BY k ORDER BY ts SESSION WITH GAP INTERVAL '10' SECOND), "
        "count(*) OVER w FROM t WINDOW w AS (ORDER BY ts SESSION WITH GAP 5)"
    )
    specs = [w.args.get("spec") for w in q.find_all(exp.Window)]
    sessions = [sp for sp in specs if sp is not None]
    assert [sp.args["kind"] for sp in sessions] == ["SESSION", "SESSION"]
    assert isinstance(sessions[0].args["start"], exp.Interval) and sessions[1].args["start"].sql() == "5"
    assert query_of(q.sql(dialect=Piestream)) == q  # regenerated text reads back the same


def test_no_command_fallback_and_no_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="sqlglot"):
        for sql in ["EXPLAIN SELECT 1", "SHOW TABLES", "RESET ALL", "SELECT 1 FROM t WHERE a[1] = 2"]:
            stmt = parse_one(sql)
            assert not isinstance(stmt, exp.Expression)
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "message", "position"),
    [
        ("SELECT * FORM t", 'syntax error at or near "FORM"', 10),
        ("SELECT (1", "syntax error at end of input", 10),
        ("SELECT (1   -- trailing\n", "syntax error at end of input", 25),
        ("SELECT 1 +", "syntax error at end of input", 11),
        ("SELECT * FROM", "syntax error at end of input", 14),
        ("SELECT a FROM t WHERE", "syntax error at end of input", 22),
        ("SELECT 1 GROUP BY", "syntax error at end of input", 18),
        ("SELECT * FROM t WHERE a = 1 ORDER", 'syntax error at or near "ORDER"', 29),
        ("SELECT * AS x FROM t", 'syntax error at or near "AS"', 10),
        ("SELECT 1 FROM t t2 t3", 'syntax error at or near "t3"', 20),
        ("SELECT 1; SELECT (1; SELECT 2", 'syntax error at or near ";"', 20),
        ("SELECT 1;\n  SELEC 2", 'syntax error at or near "SELEC"', 13),
        ("SELECT * FROM t WITH (nolock)", 'syntax error at or near "WITH"', 17),
        ("FOO BAR", 'syntax error at or near "FOO"', 1),
        ('"SELECT" 1', 'syntax error at or near ""SELECT""', 1),
        ("42", 'syntax error at or near "42"', 1),
        ("SELECT 'abc", 'unterminated quoted string at or near "\'abc"', 8),
        ("SELECT 1, E'abc", 'unterminated quoted string at or near "E\'abc"', 11),
        ('SELECT "abc', 'unterminated quoted identifier at or near ""abc"', 8),
        ("SELECT 1 /* never closed", 'unterminated /* comment at or near "/* never closed"', 10),
        ("SELECT $$abc", 'unterminated dollar-quoted string at or near "$$abc"', 8),
        ("CREATE MATERIALIZED VIEW mv AS", "syntax error at end of input", 31),
        ("CREATE MATERIALIZED VIEW mv SELECT 1", 'syntax error at or near "SELECT"', 29),
        ("CREATE MATERIALIZED VIEW mv AS INSERT INTO t VALUES (1)", 'syntax error at or near "INSERT"', 32),
        ("DROP TABLE", "syntax error at end of input", 11),
        ("SHOW COLUMNS t", 'syntax error at or near "t"', 14),
        ("SET x", "syntax error at end of input", 6),
        ("SET x = ", "syntax error at end of input", 9),
    ],
)
def test_syntax_errors(sql: str, message: str, position: int) -> None:
    err = fails(sql)
    assert (err.sqlstate, err.message, err.position) == ("42601", message, position)


def test_alter_system_and_rebuild() -> None:
    assert parse_one("ALTER SYSTEM SET streaming_strict_mode TO true") == ast.AlterSystem(
        "streaming_strict_mode", "true"
    )
    assert parse_one("ALTER SYSTEM SET Streaming_Strict_Mode = DEFAULT") == ast.AlterSystem(
        "streaming_strict_mode", None
    )
    assert parse_one("ALTER MATERIALIZED VIEW m REBUILD") == ast.RebuildJob("materialized view", "m")


def test_insert_rows_of_bare_parameters_become_a_grid() -> None:
    """A Parse message's `INSERT ... VALUES ($1, $2), ($3, $4), ...` keeps its rows as parameter
    indices (`param_rows`) with the first row as `source`; anything else parses as usual."""
    stmt = parse_one("insert into T (a, b)values($1, $2) , ( $4,$3 ), ($1,$1);")
    assert isinstance(stmt, ast.Insert) and stmt.param_rows is not None
    assert (stmt.table, stmt.columns, stmt.returning) == ("t", ["a", "b"], [])
    assert stmt.param_rows.tolist() == [[0, 1], [3, 2], [0, 0]]
    assert isinstance(stmt.source, exp.Values) and len(stmt.source.expressions) == 1
    assert stmt.text == "insert into T (a, b)values($1, $2) , ( $4,$3 ), ($1,$1)"
    for sql in (
        "INSERT INTO t VALUES ($1, $2), ($3), ($4, $5, $6)",  # widths differ: the parser's error
        "INSERT INTO t VALUES ($1, 1), ($2, 2)",
        "INSERT INTO t VALUES ($1), ($2) RETURNING a",
        "INSERT INTO t SELECT 1 UNION VALUES ($1), ($2)",
        "INSERT INTO t VALUES ($1), ($2) -- done",
        "SELECT * FROM (VALUES ($1), ($2))",
    ):
        full = parse(sql)
        assert parse_one(sql) == full[0], sql
        assert getattr(full[0], "param_rows", None) is None, sql
    assert fails("INSERT INTO t VALUES ($1, $2), ($3, $4").sqlstate == "42601"


@pytest.mark.parametrize(
    "sql, name, schema, database",
    [
        ("DROP TABLE t", "t", None, None),
        ("DROP TABLE S.T", "t", "s", None),
        ('DROP TABLE "public"."M"', "M", "public", None),
        ('DROP TABLE dev.public."a.b"', "a.b", "public", "dev"),
    ],
)
def test_object_names_keep_their_qualifiers(
    sql: str, name: str, schema: str | None, database: str | None
) -> None:
    (target,) = one(sql, Drop).names
    assert (str(target), schema_of(target), getattr(target, "database", None)) == (name, schema, database)


def test_a_name_of_four_parts_is_a_syntax_error() -> None:
    with pytest.raises(SyntaxError_) as info:
        parse("DROP TABLE a.b.c.d")
    assert info.value.sqlstate == "42601" and "too many dotted names" in str(info.value)


def test_create_table_from_a_cdc_source() -> None:
    stmt = parse("CREATE TABLE o (id int PRIMARY KEY, v varchar) FROM pg TABLE 'public.orders'")[0]
    assert isinstance(stmt, ast.CreateTable)
    assert (stmt.from_source, stmt.from_table, stmt.primary_key) == ("pg", "public.orders", ["id"])
    with pytest.raises(SyntaxError_, match='at or near "orders"'):
        parse("CREATE TABLE o (id int PRIMARY KEY) FROM pg TABLE orders")
    with pytest.raises(SyntaxError_):  # a table from a source takes the source's options
        parse("CREATE TABLE o (id int PRIMARY KEY) FROM pg TABLE 'o' WITH (connector = 'datagen')")
