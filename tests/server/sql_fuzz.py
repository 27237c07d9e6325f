"""Random statements for the SQL fuzz test: valid ones, mutated ones, semantic errors, garbage.

Valid statements come from the differential suite's generator (`tests/sql/sqlgen.py`) over the
relations the server really has (read back from its catalog after every DDL that succeeded), so
the fuzzer keeps reaching deep into the binder, planners and executors as the schema changes.
Each valid statement may then be mutated at the token level (drop, repeat, swap, replace,
insert a token; cut the text; swap a literal for an extreme one), which is where most parser and
binder crashes hide. Semantic-error templates aim at the checks a statement must pass (unknown
names, wrong arity and types, dependencies, duplicate objects, bad casts, overflow), and garbage
is keyword soup or random text. Statement `i` of seed `s` depends only on (s, i) and the schema.

The live schema stays bounded: once more than `MAX_LIVE` relations exist (semantic templates
create `z<i>` relations that are valid in piestream, e.g. an MV whose `1 / 0` streams as NULL),
the next statement is a DROP of one of them, so a long soak keeps exercising DROP and its
dependency checks instead of piling up thousands of tables.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "sql"))

from sqlgen import Column, Gen, QueryGen, Relation, dml

#: pg_type oid -> the generator's type name (columns of other types are left out of its scope)
OID_TYPES = {
    23: "int",
    20: "bigint",
    1700: "numeric",
    701: "double",
    1043: "varchar",
    25: "varchar",
    16: "bool",
    1114: "timestamp",
    1082: "date",
}

KEYWORDS = (
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "LEFT",
    "RIGHT",
    "FULL",
    "INNER",
    "CROSS",
    "ON",
    "USING",
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "ALL",
    "DISTINCT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "CREATE",
    "TABLE",
    "MATERIALIZED",
    "VIEW",
    "INDEX",
    "SOURCE",
    "SINK",
    "DROP",
    "IF",
    "EXISTS",
    "NOT",
    "CASCADE",
    "AS",
    "CAST",
    "NULL",
    "TRUE",
    "FALSE",
    "AND",
    "OR",
    "IN",
    "IS",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "WITH",
    "RECURSIVE",
    "OVER",
    "PARTITION",
    "ROWS",
    "RANGE",
    "PRIMARY",
    "KEY",
    "APPEND",
    "ONLY",
    "EXPLAIN",
    "SHOW",
    "DESCRIBE",
    "FLUSH",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "ARRAY",
    "ROW",
    "INTERVAL",
    "TIMESTAMP",
    "DATE",
    "TIME",
    "INT",
    "BIGINT",
    "SMALLINT",
    "NUMERIC",
    "REAL",
    "DOUBLE",
    "PRECISION",
    "VARCHAR",
    "TEXT",
    "BOOLEAN",
    "BYTEA",
    "JSONB",
    "STRUCT",
    "EXTRACT",
    "TUMBLE",
    "HOP",
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "string_agg",
    "array_agg",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "abs",
    "length",
    "lower",
    "upper",
    "substr",
    "trim",
    "round",
    "floor",
    "ceil",
    "now",
    "generate_series",
    "unnest",
    "lateral",
    "WATERMARK",
    "FOR",
    "EMIT",
    "CHANGES",
    "ASC",
    "DESC",
    "NULLS",
    "FIRST",
    "LAST",
    "FILTER",
    "WITHIN",
    "RETURNING",
    "CONFLICT",
    "DO",
    "NOTHING",
)
PUNCT = ("(", ")", ",", ";", "*", "+", "-", "/", "%", "=", "<>", "!=", "<", ">", "<=", ">=", "||", "::")
PUNCT += (".", "[", "]", "$1", "$0", "$99", "'", '"', "E'\\", "::int", "->", "->>", "@>", "~", "^", "&")
LITERALS = (
    "0",
    "-0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e-400",
    "0.000000000000000000000000000000000001",
    "1.5",
    "'NaN'",
    "'infinity'",
    "'-infinity'",
    "''",
    "'x'",
    "'2024-13-45'",
    "'2024-02-30 25:61:61'",
    "'99999-01-01'",
    "'abc'::int",
    "'1 day 99999999 years'",
    "'\u00e9\u4e2d\U0001f600'",
    "'it''s'",
    "E'\\x41'",
    "E'\\u00e9'",
    "B'101'",
    "X'ff'",
    "'\\xdeadbeef'",
    "NULL",
    "NULL::int",
    "CAST(NULL AS VARCHAR)",
    "ARRAY[1, 2]",
    "ARRAY[]",
    "'{1,2}'",
    "'{\"a\": 1}'::jsonb",
    "ROW(1, 'a')",
    "INTERVAL '1' DAY",
    "TIMESTAMP '2024-01-01 00:00:00'",
    "DATE 'epoch'",
    "$1",
)
IDENTS = ("t0", "t1", "t2", "nope", "k", "g", "v", "_row_id", '"T0"', '"select"', "pg_class", "public.t0")
TOKEN = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|\d+(?:\.\d+)?(?:e[-+]?\d+)?|\w+|::|<>|!=|<=|>=|\|\||\S")


#: relations (tables, MVs, views, indexes) kept alive; above it the fuzzer drops one
MAX_LIVE = 24
DROP_WORD = {"r": "TABLE", "m": "MATERIALIZED VIEW", "v": "VIEW", "i": "INDEX"}


@dataclass(frozen=True)
class Stmt:
    sql: str
    kind: str  # valid, mutated, semantic, garbage, catalog
    ddl: bool  # may change the catalog when it succeeds


def relations_from_catalog(rows: list[tuple[str, str, str, int]]) -> list[Relation]:
    """Relations (tables and MVs) from (relname, relkind, attname, atttypid) catalog rows."""
    rels: dict[str, Relation] = {}
    for name, kind, col, oid in rows:
        if kind not in ("r", "m") or col is None or col.startswith("_"):
            continue
        rel = rels.setdefault(name, Relation(name, [], "table" if kind == "r" else "mv"))
        t = OID_TYPES.get(int(oid))
        if t is not None:
            rel.cols.append(Column(col, t))
    return [r for r in rels.values() if r.cols]


def live_relations(rows: list[tuple[str, str, str, int]]) -> list[tuple[str, str]]:
    """(name, relkind) of every droppable relation in the catalog rows, columns or not."""
    return sorted({(name, kind) for name, kind, _, _ in rows if kind in DROP_WORD})


class Fuzzer:
    """Statement `i` for a schema: a pure function of (seed, i) and the relations given."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def statement(self, i: int, relations: list[Relation], live: list[tuple[str, str]] | None = None) -> Stmt:
        g = Gen(self.seed * 1_000_003 + i)
        r = g.r
        if live is not None and len(live) > MAX_LIVE:
            return self.drop_one(g, live)
        roll = r.random()
        if not relations or roll < 0.03:
            return self.create_table(g, i)
        if roll < 0.25:
            return self.valid(g, relations, i)
        if roll < 0.65:
            base = self.valid(g, relations, i)
            return Stmt(self.mutate(r, base.sql), "mutated", base.ddl)
        if roll < 0.82:
            return self.semantic(g, relations, i)
        if roll < 0.88:
            return self.catalog(r)
        return self.garbage(r)

    # -- valid ----------------------------------------------------------------------------------
    def create_table(self, g: Gen, i: int) -> Stmt:
        t = g.schema(1)[0]
        t.name = f"t{i % 7}"
        return Stmt(g.create_table_sql(t)[0], "valid", True)

    def valid(self, g: Gen, relations: list[Relation], i: int) -> Stmt:
        r = g.r
        kind = r.choices(["select", "dml", "mv", "drop", "explain", "table"], [10, 6, 2, 1, 1, 1])[0]
        tables = [x for x in relations if x.kind == "table"]
        if kind == "table" or (kind == "dml" and not tables):
            return self.create_table(g, i)
        if kind == "dml":
            try:
                return Stmt(dml(g, r.choice(tables)).pg, "valid", False)
            except (IndexError, KeyError, ValueError):
                return Stmt(f"DELETE FROM {r.choice(tables).name} WHERE false", "valid", False)
        if kind == "drop":
            x = r.choice(relations)
            what = "TABLE" if x.kind == "table" else "MATERIALIZED VIEW"
            cascade = " CASCADE" if g.chance(0.3) else ""
            return Stmt(f"DROP {what} {x.name}{cascade}", "valid", True)
        try:
            q = QueryGen(g, relations).query(1)
        except (IndexError, KeyError, ValueError):  # the generator met a schema it cannot use
            return Stmt(f"SELECT * FROM {r.choice(relations).name}", "valid", False)
        if kind == "mv":
            return Stmt(f"CREATE MATERIALIZED VIEW m{i % 11} AS {q.pg}", "valid", True)
        if kind == "explain":
            return Stmt(f"EXPLAIN {q.pg}", "valid", False)
        return Stmt(q.pg, "valid", False)

    def drop_one(self, g: Gen, live: list[tuple[str, str]]) -> Stmt:
        """A DROP of a random live relation (CASCADE or not: a refused DROP changes nothing)."""
        name, kind = g.r.choice(live)
        cascade = " CASCADE" if g.chance(0.5) else ""
        return Stmt(f'DROP {DROP_WORD[kind]} "{name}"{cascade}', "drop", True)

    # -- mutations ------------------------------------------------------------------------------
    def mutate(self, r: random.Random, sql: str) -> str:
        toks = TOKEN.findall(sql)
        for _ in range(r.choice([1, 1, 1, 2, 3])):
            if not toks:
                break
            j = r.randrange(len(toks))
            op = r.choice(["drop", "dup", "swap", "replace", "insert", "cut", "literal", "ident", "nest"])
            if op == "drop":
                del toks[j]
            elif op == "dup":
                toks.insert(j, toks[j])
            elif op == "swap" and j + 1 < len(toks):
                toks[j], toks[j + 1] = toks[j + 1], toks[j]
            elif op == "replace":
                toks[j] = self.random_token(r)
            elif op == "insert":
                toks.insert(j, self.random_token(r))
            elif op == "cut":
                toks = toks[:j]
            elif op == "literal":
                nums = [k for k, t in enumerate(toks) if t[:1].isdigit() or t.startswith("'")]
                toks[r.choice(nums) if nums else j] = r.choice(LITERALS)
            elif op == "ident":
                words = [k for k, t in enumerate(toks) if t[:1].isalpha() and t.upper() not in KEYWORDS]
                toks[r.choice(words) if words else j] = r.choice(IDENTS)
            elif op == "nest":
                depth = r.choice([2, 10, 200, 3000])
                toks[j] = "(" * depth + toks[j] + ")" * depth
        return " ".join(toks)

    @staticmethod
    def random_token(r: random.Random) -> str:
        pool = r.choice([KEYWORDS, PUNCT, LITERALS, IDENTS])
        return r.choice(pool)

    # -- semantic errors ------------------------------------------------------------------------
    def semantic(self, g: Gen, relations: list[Relation], i: int) -> Stmt:
        r = g.r
        x = r.choice(relations)
        c = r.choice(x.cols)
        other = r.choice(relations)
        n = len(x.cols)
        templates = [
            (f"SELECT nope FROM {x.name}", False),
            (f"SELECT {c.name} FROM nope_{i}", False),
            (f"SELECT * FROM {x.name} WHERE {c.name} = ", False),
            (f"SELECT {c.name} + 'abc' FROM {x.name}", False),
            (f"SELECT 1 / 0 FROM {x.name}", False),
            (f"SELECT CAST('x{i}' AS INT) FROM {x.name}", False),
            (f"SELECT 2147483647 + {r.choice(['1', '2147483647'])}", False),
            (f"SELECT 9223372036854775807 * {r.choice(['2', '-2'])}", False),
            (f"SELECT nosuchfunc({c.name}) FROM {x.name}", False),
            (f"SELECT count(*, *) FROM {x.name}", False),
            (f"SELECT sum({c.name}) OVER () FROM {x.name} GROUP BY nope", False),
            (f"SELECT {c.name} FROM {x.name} GROUP BY 99", False),
            (f"SELECT {c.name}, count(*) FROM {x.name}", False),
            (f"SELECT * FROM {x.name} ORDER BY {n + 5}", False),
            (f"SELECT * FROM {x.name} LIMIT -1", False),
            (f"SELECT * FROM {x.name} a JOIN {other.name} a ON true", False),
            (f"SELECT * FROM {x.name} UNION SELECT 1", False),
            ("SELECT (SELECT 1 UNION SELECT 2)", False),
            (f"SELECT $1 FROM {x.name}", False),
            (f"INSERT INTO {x.name} VALUES ({', '.join(['1'] * (n + 1))})", False),
            (f"INSERT INTO {x.name} ({c.name}, {c.name}) VALUES (1, 1)", False),
            (f"INSERT INTO {x.name} (nope) VALUES (1)", False),
            (f"INSERT INTO {x.name} SELECT * FROM {other.name}", False),
            (f"INSERT INTO {x.name} VALUES ({', '.join([r.choice(LITERALS) for _ in range(n)])})", False),
            (f"UPDATE {x.name} SET nope = 1", False),
            (f"UPDATE {x.name} SET {c.name} = {c.name} / 0", False),
            (f"DELETE FROM {x.name} WHERE nope", False),
            (f"DELETE FROM {x.name} WHERE {c.name}", False),
            (f"CREATE TABLE {x.name} (a INT)", True),
            (f"CREATE TABLE z{i} (a INT, a INT)", True),
            (f"CREATE TABLE z{i} (a NOSUCHTYPE)", True),
            (f"CREATE TABLE z{i} (a INT PRIMARY KEY, PRIMARY KEY (a))", True),
            (f"CREATE TABLE z{i} (a INT, PRIMARY KEY (b))", True),
            (f"CREATE TABLE z{i} ()", True),
            (f"CREATE MATERIALIZED VIEW {x.name} AS SELECT 1 AS a", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT nope FROM {x.name}", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT {c.name}, {c.name} FROM {x.name}", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT 1 / 0 AS a FROM {x.name}", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT * FROM {x.name} ORDER BY 1 LIMIT", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT now() AS t FROM {x.name}", True),
            (f"CREATE MATERIALIZED VIEW z{i} AS SELECT $1 AS a FROM {x.name}", True),
            (f"CREATE INDEX z{i} ON {x.name} (nope)", True),
            (f"CREATE INDEX z{i} ON nope_{i} ({c.name})", True),
            (f"CREATE VIEW z{i} AS SELECT nope FROM {x.name}", True),
            (f"CREATE SOURCE z{i} (a INT) WITH (connector = 'nope')", True),
            (f"CREATE SOURCE z{i} (a INT) WITH (connector = 'datagen', rows_per_second = 'x')", True),
            (f"CREATE SINK z{i} FROM {x.name} WITH (connector = 'nope')", True),
            (f"DROP TABLE nope_{i}", True),
            (f"DROP MATERIALIZED VIEW {x.name}" if x.kind == "table" else f"DROP TABLE {x.name}", True),
            (f"DROP TABLE {x.name}" if x.kind == "table" else f"DROP VIEW {x.name}", True),
            (f"DROP TABLE {x.name}, nope_{i}", True),
            # refused ALTERs (issue 31): each must leave catalog and data as they were
            (f"ALTER TABLE {x.name} ADD COLUMN {c.name} INT", True),
            (f"ALTER TABLE {x.name} ADD COLUMN z{i} INT DEFAULT 1 / 0", True),
            (f"ALTER TABLE {x.name} ADD COLUMN z{i} INT NOT NULL", True),
            (f"ALTER TABLE {x.name} ALTER COLUMN {c.name} TYPE BIGINT", True),
            (f"ALTER TABLE {x.name} DROP COLUMN nope_{i}", True),
            (f"ALTER TABLE {x.name} RENAME COLUMN nope_{i} TO z{i}", True),
            (f"ALTER TABLE nope_{i} RENAME TO z{i}", True),
            (
                f"ALTER VIEW {x.name} RENAME TO z{i}"
                if x.kind == "table"
                else f"ALTER TABLE {x.name} RENAME TO z{i}",
                True,
            ),
            (f"ALTER TABLE {x.name} ADD COLUMN z{i} INT DEFAULT 'abc'", True),
            (f"ALTER TABLE {x.name} ADD COLUMN z{i} INT PRIMARY KEY", True),
            (f"ALTER TABLE {x.name} ADD COLUMN z{i} NOSUCHTYPE", True),
            (f"ALTER TABLE {x.name} ALTER COLUMN {c.name} SET DEFAULT 1", True),
            (f"ALTER TABLE {x.name} RENAME COLUMN {c.name} TO {r.choice(x.cols).name}", True),
            (f"ALTER TABLE {x.name} RENAME TO {other.name}", True),
            (f"ALTER TABLE {x.name} OWNER TO nope_{i}", True),
            (f"ALTER TABLE {x.name} SET PARALLELISM = -1", True),
            (f"ALTER SOURCE nope_{i} ADD COLUMN z{i} INT", True),
            (f"ALTER MATERIALIZED VIEW nope_{i} RENAME TO z{i}", True),
            (f"TRUNCATE nope_{i}", True),
            (f"COMMENT ON TABLE nope_{i} IS 'x'", True),
            (f"COPY {x.name} FROM '/nonexistent/{i}.csv'", False),  # COPY FROM STDIN needs the COPY protocol
            (f"SET nope_{i} = 1", False),
            ("SET statement_timeout = 'abc'", False),
            ("SHOW nope", False),
            ("EXPLAIN nope", False),
            (f"DESCRIBE nope_{i}", False),
            ("SELECT " + "(" * 5000 + "1" + ")" * 5000, False),
            ("SELECT " + " + ".join(["1"] * 3000), False),
            ("SELECT 'a' " + "|| 'a' " * 2000 + "|| CAST(1/0 AS VARCHAR)", False),
            (f"SELECT * FROM {x.name} WHERE {c.name} IN ({', '.join(['NULL'] * 500)}, 1/0)", False),
            ("SELECT repeat('x', 2147483647)", False),
            ("SELECT generate_series(1, 9223372036854775807)", False),
            ("PREPARE p AS SELECT 1", False),
            ("LISTEN x", False),
            ("VACUUM", False),
        ]
        sql, ddl = r.choice(templates)
        return Stmt(sql, "semantic", ddl)

    # -- catalog and garbage --------------------------------------------------------------------
    def catalog(self, r: random.Random) -> Stmt:
        queries = [
            "SELECT c.relname, c.relkind FROM pg_catalog.pg_class c WHERE c.relname ~ '^t'",
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c "
            "LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r','m')",
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a "
            "WHERE a.attrelid = 't0'::regclass AND a.attnum > 0",
            "SELECT table_name, column_name, data_type FROM information_schema.columns",
            "SELECT * FROM pg_matviews",
            "SELECT version()",
            "SELECT current_database(), current_schema()",
            "SELECT oid, typname FROM pg_type WHERE typname = ANY(ARRAY['int4', 'text'])",
        ]
        sql = r.choice(queries)
        if r.random() < 0.6:
            sql = self.mutate(r, sql)
        return Stmt(sql, "catalog", False)

    def garbage(self, r: random.Random) -> Stmt:
        form = r.random()
        if form < 0.5:
            toks = [self.random_token(r) for _ in range(r.randint(1, 25))]
            return Stmt(" ".join(toks), "garbage", True)
        if form < 0.8:  # printable text, sometimes starting like a statement
            alphabet = "abcdefghijklmnopqrstuvwxyz ()*,;'\"$:.=<>!-+/\\\t\n0123456789_[]{}|&^%~`@#?"
            text = "".join(r.choice(alphabet) for _ in range(r.randint(1, 200)))
            prefix = r.choice(["", "", "SELECT ", "CREATE ", "INSERT INTO t0 ", "DROP "])
            return Stmt(prefix + text, "garbage", True)
        # any unicode but NUL (psycopg cannot send one in a query string; the protocol fuzz does)
        chars = [chr(r.choice([r.randint(1, 0x7F), r.randint(0x80, 0xD7FF), r.randint(0xE000, 0x10FFFF)]))]
        chars += [chr(r.randint(1, 0x2FFF)) for _ in range(r.randint(0, 100))]
        return Stmt("".join(chars), "garbage", True)


def protocol_blob(r: random.Random) -> tuple[bool, bytes]:
    """(send a valid startup first?, bytes): garbage before or after the startup handshake."""
    import struct

    def msg(kind: bytes, body: bytes) -> bytes:
        return kind + struct.pack("!i", len(body) + 4) + body

    form = r.randrange(8)
    rand = bytes(r.randrange(256) for _ in range(r.randint(0, 300)))
    if form == 0:  # raw garbage instead of a startup packet
        return False, rand
    if form == 1:  # a startup packet with a random length / protocol / parameters
        body = struct.pack("!i", r.choice([196608, 80877103, 80877102, 0, -1, 1234, 196609])) + rand
        length = r.choice([len(body) + 4, 0, 3, 8, 1 << 30, -5, 10001])
        return False, struct.pack("!i", length) + body
    if form == 2:  # a message of a random type with a random body
        return True, msg(bytes([r.randrange(256)]), rand)
    if form == 3:  # a known type with a garbage body
        return True, msg(bytes([r.choice(b"QPBDESHCFfdcp")]), rand)
    if form == 4:  # a lying length
        kind = bytes([r.choice(b"QPBDESHC")])
        return True, kind + struct.pack("!i", r.choice([-1, 0, 3, 1 << 30, 2**31 - 1, 5])) + rand
    if form == 5:  # extended query messages out of order / with bad references
        parts = [
            msg(b"B", b"nostmt\0" + b"nostmt\0" + struct.pack("!hhh", 0, 0, 0)),
            msg(b"E", b"noportal\0" + struct.pack("!i", 0)),
            msg(b"D", b"S" + b"nostmt\0"),
            msg(b"P", b"\0" + b"SELECT $1::int\0" + struct.pack("!hi", 1, 23)),
            msg(
                b"B", b"\0\0" + struct.pack("!hh", 1, 1) + struct.pack("!h", 1) + struct.pack("!i", 2) + b"xy"
            ),
            msg(b"E", b"\0" + struct.pack("!i", 0)),
            msg(b"C", b"Sx\0"),
            msg(b"S", b""),
        ]
        r.shuffle(parts)
        return True, b"".join(parts[: r.randint(1, len(parts))])
    if form == 6:  # a simple query whose text holds NUL and invalid UTF-8
        text = b"SELECT '" + rand.replace(b"\0", b"\x01") + b"'"
        return True, msg(b"Q", text + b"\0" + rand[:5])
    # a flood of tiny valid-looking messages, then garbage
    return True, b"".join(msg(b"Q", b"SELECT 1\0") for _ in range(r.randint(1, 50))) + rand
