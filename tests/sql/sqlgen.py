"""Random schemas, DML sequences and materialized-view queries for the differential SQL suite.

Everything is generated twice: as piestream SQL (PostgreSQL flavour with RisingWave's TUMBLE /
HOP) and as DuckDB SQL computing the same result from scratch. The two differ only where the
dialects do (window table functions, type names, a typed NULL); all other text is shared.

What the generator keeps deterministic on purpose, so that the oracle's answer is the only right
one: small value domains (joins and groups hit), exactly representable doubles (sums do not
depend on the order of addition), ORDER BY over every output column of a TopN / GroupTopN (rows
that tie are identical, so which of them is kept does not matter), string_agg / array_agg ordered
by the aggregated value, division only by non-zero constants, values far from overflow.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal

NUMS = ("int", "bigint", "numeric", "double")
TYPES = ("int", "bigint", "numeric", "double", "varchar", "bool", "timestamp", "date")
PG_TYPE = {
    "int": "INT",
    "bigint": "BIGINT",
    "numeric": "NUMERIC",
    "double": "DOUBLE PRECISION",
    "varchar": "VARCHAR",
    "bool": "BOOLEAN",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
}
DK_TYPE = {
    "int": "INTEGER",
    "bigint": "BIGINT",
    "numeric": "DECIMAL(24,6)",
    "double": "DOUBLE",
    "varchar": "VARCHAR",
    "bool": "BOOLEAN",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
}
STRINGS = ("a", "b", "c", "ab", "B", "", "xa")
BASE_TS = dt.datetime(2024, 1, 1)
BASE_DATE = dt.date(2024, 1, 1)


def category(t: str) -> str:
    if t in NUMS:
        return "num"
    if t in ("timestamp", "date"):
        return "time"
    return t


@dataclass(frozen=True)
class E:
    """One expression in both dialects, with its (approximate) SQL type."""

    pg: str
    dk: str
    t: str

    @staticmethod
    def same(text: str, t: str) -> E:
        return E(text, text, t)


def fmt(template: str, t: str, *args: E) -> E:
    """`template` with {0}, {1}, ... filled by the arguments' text in each dialect."""
    return E(template.format(*(a.pg for a in args)), template.format(*(a.dk for a in args)), t)


@dataclass(frozen=True)
class Column:
    name: str
    t: str


@dataclass
class Relation:
    """A table, MV or view that FROM can name."""

    name: str
    cols: list[Column]
    kind: str = "table"  # table, mv, view
    pk: list[str] = field(default_factory=list)
    append_only: bool = False
    conflict: str = "overwrite"  # overwrite (upsert), ignore (DO NOTHING)

    def col(self, name: str) -> Column:
        return next(c for c in self.cols if c.name == name)

    @property
    def usable(self) -> list[Column]:
        return [c for c in self.cols if c.t in TYPES]


@dataclass
class Src:
    """A FROM item in both dialects and the columns it exposes under `alias`."""

    pg: str
    dk: str
    alias: str
    cols: list[Column]
    ctes: list[tuple[str, Query]] = field(default_factory=list)


@dataclass
class Query:
    pg: str
    dk: str
    cols: list[Column]  # output columns c0, c1, ...
    shape: str
    may_be_unsupported: bool = False  # a 0A000 at CREATE time is acceptable (known gaps)


Scope = list[tuple[str, Column]]


def ref(alias: str, c: Column) -> E:
    return E.same(f"{alias}.{c.name}", c.t)


def sql_value(v: object, t: str) -> str:
    """A literal for INSERT ... VALUES (untyped where PostgreSQL would resolve it by the column)."""
    if v is None:
        return "NULL"
    if t == "bool":
        return "TRUE" if v else "FALSE"
    if t in ("varchar", "timestamp", "date"):
        return f"'{v}'"
    return str(v)


class Gen:
    """One seed's random choices."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.r = random.Random(seed)
        self.n_alias = 0

    def alias(self, prefix: str = "s") -> str:
        self.n_alias += 1
        return f"{prefix}{self.n_alias}"

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    # -- schema ---------------------------------------------------------------------------------
    def schema(self, n_tables: int = 3) -> list[Relation]:
        tables = []
        for i in range(n_tables):
            kind = self.r.choice(["pk", "pk", "pk2", "nopk", "append", "append_pk", "pk_nothing"])
            cols: list[Column] = []
            pk: list[str] = []
            if kind in ("pk", "append_pk", "pk_nothing"):
                cols.append(Column("k", self.r.choice(["int", "bigint", "varchar"])))
                pk = ["k"]
            elif kind == "pk2":
                cols += [Column("k", "int"), Column("k2", self.r.choice(["int", "varchar"]))]
                pk = ["k", "k2"]
            # a join column with a shared small domain, then random ones
            cols.append(Column("g", self.r.choice(["int", "int", "bigint"])))
            extra = self.r.sample(TYPES, self.r.randint(2, 4))
            if self.chance(0.5) and "timestamp" not in extra:
                extra.append("timestamp")
            for j, t in enumerate(extra):
                cols.append(Column(f"{t[0]}{j}", t))
            tables.append(
                Relation(
                    f"t{i}",
                    cols,
                    "table",
                    pk,
                    append_only=kind.startswith("append"),
                    conflict="ignore" if kind in ("append_pk", "pk_nothing") else "overwrite",
                )
            )
        return tables

    def create_table_sql(self, t: Relation) -> tuple[str, str]:
        pk = f", PRIMARY KEY ({', '.join(t.pk)})" if t.pk else ""
        pg_cols = ", ".join(f"{c.name} {PG_TYPE[c.t]}" for c in t.cols)
        dk_cols = ", ".join(f"{c.name} {DK_TYPE[c.t]}" for c in t.cols)
        pg = f"CREATE TABLE {t.name} ({pg_cols}{pk})"
        if t.append_only:
            pg += " APPEND ONLY"
        if t.pk and t.conflict == "ignore" and not t.append_only:
            pg += " ON CONFLICT DO NOTHING"
        return pg, f"CREATE TABLE {t.name} ({dk_cols}{pk})"

    # -- values ---------------------------------------------------------------------------------
    def value(self, t: str, null_p: float = 0.15) -> object:
        if self.chance(null_p):
            return None
        r = self.r
        if t in ("int", "bigint"):
            return r.randint(-2, 7)
        if t == "numeric":
            return Decimal(r.randint(-40, 120)) / 4
        if t == "double":
            return r.randint(-20, 60) / 8
        if t == "varchar":
            return r.choice(STRINGS)
        if t == "bool":
            return r.random() < 0.5
        if t == "timestamp":
            return str(BASE_TS + dt.timedelta(minutes=r.randint(0, 24) * 7, seconds=r.choice([0, 0, 30])))
        if t == "date":
            return str(BASE_DATE + dt.timedelta(days=r.randint(0, 6)))
        raise AssertionError(t)

    def key_value(self, t: str) -> object:
        if t == "varchar":
            return self.r.choice(["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"])
        return self.r.randint(0, 11)

    def row(self, t: Relation) -> dict[str, object]:
        row = {}
        for c in t.cols:
            if c.name in t.pk:
                row[c.name] = self.key_value(c.t)
            elif c.name == "g":
                row[c.name] = self.value(c.t, 0.1) if c.t != "int" else self.r.choice([None, 0, 1, 2, 3, 4])
            else:
                row[c.name] = self.value(c.t)
        return row

    # -- expressions ----------------------------------------------------------------------------
    def literal(self, t: str) -> E:
        v = self.value(t, null_p=0.0)
        if t in ("int", "bigint"):
            s = str(v) if int(v) >= 0 else f"({v})"  # type: ignore[call-overload]
            return E.same(s if t == "int" else f"CAST({s} AS BIGINT)", t)
        if t == "numeric":
            s = str(v) if "." in str(v) else f"{v}.0"  # "28" would be an integer literal
            return E.same(s if not s.startswith("-") else f"({s})", t)
        if t == "double":
            return E(f"CAST({v} AS DOUBLE PRECISION)", f"CAST({v} AS DOUBLE)", t)
        if t == "varchar":
            return E.same(f"'{v}'", t)
        if t == "bool":
            return E.same("TRUE" if v else "FALSE", t)
        if t == "timestamp":
            return E.same(f"TIMESTAMP '{v}'", t)
        if t == "date":
            return E.same(f"DATE '{v}'", t)
        raise AssertionError(t)

    def null(self, t: str) -> E:
        return E(f"CAST(NULL AS {PG_TYPE[t]})", f"CAST(NULL AS {DK_TYPE[t]})", t)

    def cols_of(self, scope: Scope, pred: object) -> list[E]:
        return [ref(a, c) for a, c in scope if pred(c.t)]  # type: ignore[operator]

    def leaf(self, t: str, scope: Scope) -> E:
        exact = self.cols_of(scope, lambda x: x == t)
        if exact and self.chance(0.8):
            return self.r.choice(exact)
        if t in NUMS:
            # integer columns widen to the wanted type (never narrow: a bigint is no int)
            wider = ("int",) if t != "int" else ()
            nums = self.cols_of(scope, lambda x: x in wider or x == t)
            if nums and self.chance(0.6):
                c = self.r.choice(nums)
                if c.t == t:
                    return c
                return E(f"CAST({c.pg} AS {PG_TYPE[t]})", f"CAST({c.dk} AS {DK_TYPE[t]})", t)
        if t == "varchar":
            ints = self.cols_of(scope, lambda x: x in ("int", "bigint"))
            if ints and self.chance(0.3):
                return fmt("CAST({0} AS VARCHAR)", t, self.r.choice(ints))
        if t == "date":
            ts = self.cols_of(scope, lambda x: x == "timestamp")
            if ts and self.chance(0.5):
                return fmt("CAST({0} AS DATE)", t, self.r.choice(ts))
        if self.chance(0.05):
            return self.null(t)
        return self.literal(t)

    def expr(self, t: str, scope: Scope, depth: int = 2) -> E:
        """An expression of type `t` (an integer-typed one is widened to `t` explicitly, so that
        the label is PostgreSQL's type: ceil(bigint) is double precision, ceil(numeric) numeric)."""
        e = self._expr(t, scope, depth)
        if e.t != t and t in NUMS and e.t in ("int", "bigint"):
            return E(f"CAST({e.pg} AS {PG_TYPE[t]})", f"CAST({e.dk} AS {DK_TYPE[t]})", t)
        return e

    def _expr(self, t: str, scope: Scope, depth: int) -> E:
        if depth <= 0 or self.chance(0.45):
            return self.leaf(t, scope)
        d = depth - 1
        r = self.r
        if t == "bool":
            return self.pred(scope, depth)
        common = ["case", "coalesce", "nullif", "case_simple", "greatest"]
        if t in ("int", "bigint"):
            op = r.choice(
                ["+", "-", "*", "/", "%", "abs", "length", "neg", "mod", "strpos", "datediff", *common]
            )
            if op == "mod":
                return fmt(f"mod({{0}}, {r.choice([2, 3, -4])})", t, self.expr(t, scope, d))
            if op == "strpos":
                return fmt(
                    f"strpos({{0}}, '{r.choice(['a', 'b', ''])}')", "int", self.expr("varchar", scope, d)
                )
            if op == "datediff":
                return fmt("({0} - {1})", "int", self.expr("date", scope, d), self.expr("date", scope, d))
            if op in ("+", "-"):
                return fmt(f"({{0}} {op} {{1}})", t, self.expr(t, scope, d), self.expr("int", scope, d))
            if op == "*":
                return fmt("({0} * {1})", t, self.expr(t, scope, d), self.literal("int"))
            if op in ("/", "%"):
                return fmt(f"({{0}} {op} {r.choice([2, 3, -2])})", t, self.expr(t, scope, d))
            if op == "abs":
                return fmt("abs({0})", t, self.expr(t, scope, d))
            if op == "neg":
                return fmt("(- {0})", t, self.expr(t, scope, d))
            if op == "length":
                return fmt("length({0})", "int", self.expr("varchar", scope, d))
        elif t == "numeric":
            op = r.choice(["+", "-", "*int", "round", "abs", "floor", "ceil", "extract", *common])
            if op in ("floor", "ceil"):
                return fmt(f"{op}({{0}})", t, self.expr(t, scope, d))
            if op == "extract":
                part = r.choice(["HOUR", "DAY", "MINUTE"])
                return fmt(f"EXTRACT({part} FROM {{0}})", t, self.expr("timestamp", scope, d))
            if op in ("+", "-"):
                return fmt(f"({{0}} {op} {{1}})", t, self.expr(t, scope, d), self.expr(t, scope, d))
            if op == "*int":
                return fmt("({0} * {1})", t, self.expr(t, scope, d), self.expr("int", scope, 0))
            if op == "round":
                return fmt("round({0}, 1)", t, self.expr(t, scope, d))
            if op == "abs":
                return fmt("abs({0})", t, self.expr(t, scope, d))
        elif t == "double":
            op = r.choice(["+", "-", "*2", "/2", "abs", *common])
            if op in ("+", "-"):
                return fmt(f"({{0}} {op} {{1}})", t, self.expr(t, scope, d), self.expr(t, scope, d))
            if op == "*2":
                return fmt("({0} * 2)", t, self.expr(t, scope, d))
            if op == "/2":
                return fmt("({0} / 2)", t, self.expr(t, scope, d))
            if op == "abs":
                return fmt("abs({0})", t, self.expr(t, scope, d))
        elif t == "varchar":
            ops = [
                "upper",
                "lower",
                "||",
                "substr",
                "replace",
                "trim",
                "concat",
                "split_part",
                "left",
                "lpad",
            ]
            op = r.choice([*ops, "regexp_replace", *common])
            if op == "concat":
                return fmt("concat({0}, {1})", t, self.expr(t, scope, d), self.expr(t, scope, d))
            if op == "split_part":
                return fmt(f"split_part({{0}}, 'a', {r.randint(1, 2)})", t, self.expr(t, scope, d))
            if op == "left":
                return fmt(f"left({{0}}, {r.randint(1, 2)})", t, self.expr(t, scope, d))
            if op == "lpad":
                return fmt("lpad({0}, 3, '*')", t, self.expr(t, scope, d))
            if op == "regexp_replace":
                return fmt("regexp_replace({0}, 'a+', 'z')", t, self.expr(t, scope, d))
            if op in ("upper", "lower", "trim"):
                return fmt(f"{op}({{0}})", t, self.expr(t, scope, d))
            if op == "||":
                return fmt("({0} || {1})", t, self.expr(t, scope, d), self.expr(t, scope, d))
            if op == "substr":
                return fmt(f"substr({{0}}, {r.randint(1, 2)}, {r.randint(1, 2)})", t, self.expr(t, scope, d))
            if op == "replace":
                return fmt("replace({0}, 'a', 'z')", t, self.expr(t, scope, d))
        elif t == "timestamp":
            op = r.choice(["+iv", "-iv", "trunc", *common])
            if op in ("+iv", "-iv"):
                iv = r.choice(["1 hour", "30 minutes", "1 day"])
                return fmt(f"({{0}} {op[0]} INTERVAL '{iv}')", t, self.expr(t, scope, d))
            if op == "trunc":
                return fmt(f"date_trunc('{r.choice(['hour', 'day'])}', {{0}})", t, self.expr(t, scope, d))
        elif t == "date":
            op = r.choice(["+n", *common])
            if op == "+n":
                return fmt(f"({{0}} + {r.randint(0, 3)})", t, self.expr(t, scope, d))
        op = r.choice(common)
        if op == "nullif":
            return fmt("NULLIF({0}, {1})", t, self.expr(t, scope, d), self.literal(t))
        if op == "greatest" and t != "bool":
            return fmt(
                f"{r.choice(['GREATEST', 'LEAST'])}({{0}}, {{1}})",
                t,
                self.expr(t, scope, d),
                self.expr(t, scope, d),
            )
        if op == "case_simple" and t != "bool":
            x = self.leaf(t, scope)
            return fmt(
                "CASE {0} WHEN {1} THEN {2} ELSE {3} END", t, x, self.literal(t), self.expr(t, scope, d), x
            )
        if op == "case" or op in ("greatest", "case_simple"):
            return fmt(
                "CASE WHEN {0} THEN {1} ELSE {2} END",
                t,
                self.pred(scope, d),
                self.expr(t, scope, d),
                self.expr(t, scope, d),
            )
        return fmt("COALESCE({0}, {1})", t, self.expr(t, scope, d), self.expr(t, scope, d))

    def any_type(self, scope: Scope) -> str:
        present = [c.t for _, c in scope if c.t in TYPES]
        if present and self.chance(0.8):
            return self.r.choice(present)
        return self.r.choice(TYPES)

    def pred(self, scope: Scope, depth: int = 2) -> E:
        r = self.r
        d = max(depth - 1, 0)
        choices = ["cmp", "cmp", "cmp", "isnull", "between", "in", "like", "distinct", "boolcol"]
        if depth > 0:
            choices += ["and", "or", "not", "istrue"]
        op = r.choice(choices)
        if op == "istrue":
            return fmt(
                f"(({{0}}) {r.choice(['IS TRUE', 'IS NOT FALSE', 'IS FALSE'])})", "bool", self.pred(scope, d)
            )
        if op in ("and", "or"):
            return fmt(f"({{0}} {op.upper()} {{1}})", "bool", self.pred(scope, d), self.pred(scope, d))
        if op == "not":
            return fmt("(NOT {0})", "bool", self.pred(scope, d))
        if op == "boolcol":
            bools = self.cols_of(scope, lambda x: x == "bool")
            if bools:
                return r.choice(bools)
            op = "cmp"
        if op == "like":
            return fmt(
                f"({{0}} {r.choice(['LIKE', 'NOT LIKE', 'ILIKE'])} '{r.choice(['a%', '%b', '_', '%a%'])}')",
                "bool",
                self.expr("varchar", scope, d),
            )
        t = self.any_type(scope)
        if t == "bool" and op in ("between", "in"):
            op = "cmp"
        a = self.expr(t, scope, d)
        if op == "isnull":
            return fmt(f"({{0}} IS {r.choice(['', 'NOT '])}NULL)", "bool", a)
        if op == "between":
            return fmt("({0} BETWEEN {1} AND {2})", "bool", a, self.literal(t), self.literal(t))
        if op == "in":
            items = [self.literal(t) for _ in range(r.randint(1, 3))]
            neg = r.choice(["", "NOT "])
            return E(
                f"({a.pg} {neg}IN ({', '.join(i.pg for i in items)}))",
                f"({a.dk} {neg}IN ({', '.join(i.dk for i in items)}))",
                "bool",
            )
        b = self.expr(self.same_category(t, scope), scope, d) if self.chance(0.6) else self.literal(t)
        if op == "distinct":
            return fmt(f"({{0}} IS {r.choice(['', 'NOT '])}DISTINCT FROM {{1}})", "bool", a, b)
        cmp = r.choice(["=", "<>", "<", "<=", ">", ">="] if t != "bool" else ["=", "<>"])
        return fmt(f"({{0}} {cmp} {{1}})", "bool", a, b)

    def same_category(self, t: str, scope: Scope) -> str:
        cat = category(t)
        options = [c.t for _, c in scope if category(c.t) == cat]
        return self.r.choice(options) if options and self.chance(0.7) else t

    # -- aggregates -----------------------------------------------------------------------------
    def agg(self, scope: Scope) -> E:
        r = self.r
        kind = r.choice(
            [
                "count_star",
                "count",
                "count_distinct",
                "sum",
                "sum",
                "avg",
                "min",
                "max",
                "filter",
                "string_agg",
                "array_agg",
                "bool_and",
                "bool_or",
            ]
        )
        if kind == "count_star":
            return E.same("count(*)", "bigint")
        if kind == "filter":
            p = self.pred(scope, 1)
            if self.chance(0.5):
                return fmt("count(*) FILTER (WHERE {0})", "bigint", p)
            x = self.expr(r.choice(NUMS), scope, 1)
            return fmt("sum({0}) FILTER (WHERE {1})", _sum_type(x.t), x, p)
        if kind in ("count", "count_distinct"):
            x = self.expr(self.any_type(scope), scope, 1)
            return fmt("count(DISTINCT {0})" if kind == "count_distinct" else "count({0})", "bigint", x)
        if kind in ("sum", "avg"):
            x = self.expr(r.choice(NUMS), scope, 1)
            return fmt(f"{kind}({{0}})", _sum_type(x.t) if kind == "sum" else _avg_type(x.t), x)
        if kind in ("min", "max"):
            t = r.choice([x for x in TYPES if x != "bool"])
            x = self.expr(t, scope, 1)
            if self.chance(0.2):
                return fmt(f"{kind}(DISTINCT {{0}})", t, x)
            return fmt(f"{kind}({{0}})", t, x)
        if kind == "string_agg":
            x = self.expr("varchar", scope, 1)
            order = r.choice(["", " DESC"])
            distinct = "DISTINCT " if self.chance(0.3) else ""
            return fmt(f"string_agg({distinct}{{0}}, ',' ORDER BY {{0}}{order})", "varchar", x)
        if kind == "array_agg":
            t = r.choice(["int", "varchar", "bigint"])
            x = self.expr(t, scope, 1)
            order = r.choice(["", " DESC", " NULLS FIRST", " DESC NULLS LAST"])
            if self.chance(0.4):  # by another value first; ties broken by the value itself
                y = self.expr(r.choice([c for c in TYPES if c != "bool"]), scope, 1)
                return fmt(f"array_agg({{0}} ORDER BY {{1}}{order}, {{0}})", "array", x, y)
            return fmt(f"array_agg({{0}} ORDER BY {{0}}{order})", "array", x)
        p = self.pred(scope, 1)
        return fmt(f"{kind}({{0}})", "bool", p)


def _sum_type(t: str) -> str:
    return {"int": "bigint", "bigint": "numeric"}.get(t, t)


def _avg_type(t: str) -> str:
    return "double" if t == "double" else "numeric"


# -- queries ------------------------------------------------------------------------------------

SHAPES = (
    "project",
    "join",
    "semi_anti",
    "agg",
    "join_agg",
    "scalar_subquery",
    "correlated",
    "union",
    "distinct",
    "topn",
    "group_topn",
    "over_window",
    "window",
    "cte",
    "subquery_from",
    "natural_using",
    "corresponding",
    "set_op",
    "srf",
    "srf",  # listed twice: its variants (select list, FROM, ordinality) need the draws
    "window_frame",
    "window_frame",
    "distinct_on",
)


class QueryGen:
    """Random MV queries over `relations` (tables, earlier MVs, views)."""

    def __init__(self, g: Gen, relations: list[Relation]) -> None:
        self.g = g
        self.r = g.r
        self.relations = relations

    # -- FROM items -----------------------------------------------------------------------------
    def rel(self, need_ts: bool = False) -> Relation:
        rels = [x for x in self.relations if x.usable]
        if need_ts:
            rels = [x for x in rels if any(c.t == "timestamp" for c in x.cols)]
        return self.r.choice(rels)

    def src_named(self, rel: Relation | None = None) -> Src:
        rel = rel or self.rel()
        a = self.g.alias("a")
        return Src(f"{rel.name} AS {a}", f"{rel.name} AS {a}", a, rel.usable)

    def src(self, depth: int) -> Src:
        if depth > 0 and self.g.chance(0.15):
            q = self.query(depth - 1, shapes=("project", "agg", "distinct", "union", "join", "topn"))
            a = self.g.alias("q")
            return Src(f"({q.pg}) AS {a}", f"({q.dk}) AS {a}", a, q.cols)
        return self.src_named()

    @staticmethod
    def scope(*srcs: Src) -> Scope:
        return [(s.alias, c) for s in srcs for c in s.cols]

    # -- select lists ---------------------------------------------------------------------------
    def select_list(self, scope: Scope, n: int | None = None) -> list[E]:
        n = n or self.r.randint(1, 4)
        out = []
        for _ in range(n):
            if self.g.chance(0.5):
                a, c = self.r.choice(scope)
                out.append(ref(a, c))
            else:
                out.append(self.g.expr(self.g.any_type(scope), scope, 2))
        return out

    @staticmethod
    def aliased(exprs: list[E]) -> tuple[str, str, list[Column]]:
        pg = ", ".join(f"{e.pg} AS c{i}" for i, e in enumerate(exprs))
        dk = ", ".join(f"{e.dk} AS c{i}" for i, e in enumerate(exprs))
        return pg, dk, [Column(f"c{i}", e.t) for i, e in enumerate(exprs)]

    def where(self, scope: Scope, p: float = 0.6) -> tuple[str, str]:
        if not self.g.chance(p):
            return "", ""
        w = self.g.pred(scope, 2)
        return f" WHERE {w.pg}", f" WHERE {w.dk}"

    # -- shapes ---------------------------------------------------------------------------------
    def query(self, depth: int = 1, shapes: tuple[str, ...] = SHAPES) -> Query:
        shape = self.r.choice(shapes)
        return getattr(self, f"q_{shape}")(depth)

    def q_project(self, depth: int) -> Query:
        s = self.src(depth)
        sc = self.scope(s)
        pg, dk, cols = self.aliased(self.select_list(sc))
        wp, wd = self.where(sc)
        if self.g.chance(0.2):  # ORDER BY without LIMIT: only the MV's pk order
            wp += f" ORDER BY {self.order_by([c.name for c in cols])}"
            wd += f" ORDER BY {self.order_by([c.name for c in cols])}"
        return Query(f"SELECT {pg} FROM {s.pg}{wp}", f"SELECT {dk} FROM {s.dk}{wd}", cols, "project")

    def equi(self, left: Scope, right: Scope) -> tuple[E, E]:
        """A column of each side with the same category (the shared `g` columns when possible)."""
        pairs = [
            (ref(a, c), ref(b, d))
            for a, c in left
            for b, d in right
            if category(c.t) == category(d.t) and c.t != "bool"
        ]
        g_pairs = [(x, y) for x, y in pairs if x.pg.endswith(".g") and y.pg.endswith(".g")]
        k_pairs = [(x, y) for x, y in pairs if x.pg.endswith(".k") and y.pg.endswith(".k")]
        if k_pairs and self.g.chance(0.25):  # both sides' keys: no exchange, one fragment
            return self.r.choice(k_pairs)
        if g_pairs and self.g.chance(0.6):
            return self.r.choice(g_pairs)
        if pairs:
            return self.r.choice(pairs)
        return self.g.expr("int", left, 1), self.g.expr("int", right, 1)

    def join_src(self, depth: int) -> tuple[str, str, Scope, str]:
        left, right = self.src(depth), self.src(depth)
        kind = self.r.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "JOIN"])
        ls, rs = self.scope(left), self.scope(right)
        a, b = self.equi(ls, rs)
        eq = " IS NOT DISTINCT FROM " if self.g.chance(0.15) else " = "  # a null-safe key
        on_pg, on_dk = f"{a.pg}{eq}{b.pg}", f"{a.dk}{eq}{b.dk}"
        if kind == "JOIN" and self.g.chance(0.2):  # the equality in WHERE of a comma join
            w = self.g.pred(ls + rs, 0) if self.g.chance(0.5) else None
            cond_pg = on_pg + (f" AND {w.pg}" if w else "")
            cond_dk = on_dk + (f" AND {w.dk}" if w else "")
            return (
                f"{left.pg}, {right.pg} WHERE {cond_pg}",
                f"{left.dk}, {right.dk} WHERE {cond_dk}",
                ls + rs,
                "comma",
            )
        if self.g.chance(0.3):  # a second equality
            a2, b2 = self.equi(ls, rs)
            on_pg += f" AND {a2.pg} = {b2.pg}"
            on_dk += f" AND {a2.dk} = {b2.dk}"
        if self.g.chance(0.35):  # a residual (non-equi) condition
            res = self.g.pred(ls + rs, 1)
            on_pg += f" AND {res.pg}"
            on_dk += f" AND {res.dk}"
        pg = f"{left.pg} {kind} {right.pg} ON {on_pg}"
        dk = f"{left.dk} {kind} {right.dk} ON {on_dk}"
        return pg, dk, ls + rs, kind

    def q_join(self, depth: int) -> Query:
        fpg, fdk, sc, kind = self.join_src(depth)
        pg, dk, cols = self.aliased(self.select_list(sc, self.r.randint(2, 5)))
        wp, wd = self.where(sc, 0.4)
        if kind == "comma" and wp:
            wp, wd = wp.replace(" WHERE ", " AND ", 1), wd.replace(" WHERE ", " AND ", 1)
        return Query(f"SELECT {pg} FROM {fpg}{wp}", f"SELECT {dk} FROM {fdk}{wd}", cols, "join")

    def q_semi_anti(self, depth: int) -> Query:
        outer = self.src(depth)
        inner = self.src_named()
        os_, is_ = self.scope(outer), self.scope(inner)
        a, b = self.equi(os_, is_)
        form = self.r.choice(["exists", "not_exists", "in", "not_in"])
        if form in ("exists", "not_exists"):
            cond_pg, cond_dk = f"{b.pg} = {a.pg}", f"{b.dk} = {a.dk}"
            if self.g.chance(0.4):
                p = self.g.pred(is_, 1)
                cond_pg += f" AND {p.pg}"
                cond_dk += f" AND {p.dk}"
            if self.g.chance(0.25):  # a correlated non-equality next to the equality
                p = self.g.pred(os_ + is_, 1)
                cond_pg += f" AND {p.pg}"
                cond_dk += f" AND {p.dk}"
            neg = "NOT " if form == "not_exists" else ""
            w_pg = f"{neg}EXISTS (SELECT 1 FROM {inner.pg} WHERE {cond_pg})"
            w_dk = f"{neg}EXISTS (SELECT 1 FROM {inner.dk} WHERE {cond_dk})"
        else:
            wp, wd = self.where(is_, 0.5)
            neg = "NOT " if form == "not_in" else ""
            w_pg = f"{a.pg} {neg}IN (SELECT {b.pg} FROM {inner.pg}{wp})"
            w_dk = f"{a.dk} {neg}IN (SELECT {b.dk} FROM {inner.dk}{wd})"
        if self.g.chance(0.4):
            p = self.g.pred(os_, 1)
            w_pg, w_dk = f"{w_pg} AND {p.pg}", f"{w_dk} AND {p.dk}"
        pg, dk, cols = self.aliased(self.select_list(os_))
        return Query(
            f"SELECT {pg} FROM {outer.pg} WHERE {w_pg}",
            f"SELECT {dk} FROM {outer.dk} WHERE {w_dk}",
            cols,
            "semi_anti",
        )

    def group_by(self, sc: Scope, fpg: str, fdk: str, shape: str, comma: bool = False) -> Query:
        n_keys = self.r.choice([0, 1, 1, 1, 2])
        keys = []
        for _ in range(n_keys):
            if self.g.chance(0.7):
                cands = [(a, c) for a, c in sc if c.name == "g" or c.t in ("varchar", "bool", "int", "date")]
                a, c = self.r.choice(cands or sc)
                keys.append(ref(a, c))
            else:
                keys.append(self.g.expr(self.r.choice(["int", "varchar", "bool"]), sc, 1))
        # a bare integer in GROUP BY is an ordinal: keep only keys that read a column
        keys = [k for k in keys if "." in k.pg]
        aggs = [self.g.agg(sc) for _ in range(self.r.randint(1, 3))]
        pg, dk, cols = self.aliased(keys + aggs)
        wp, wd = self.where(sc, 0.4)
        if comma and wp:  # a comma join's condition is already a WHERE
            wp, wd = wp.replace(" WHERE ", " AND ", 1), wd.replace(" WHERE ", " AND ", 1)
        gp = f" GROUP BY {', '.join(k.pg for k in keys)}" if keys else ""
        gd = f" GROUP BY {', '.join(k.dk for k in keys)}" if keys else ""
        if self.g.chance(0.35):
            h = self.having(sc, keys)
            gp += f" HAVING {h.pg}"
            gd += f" HAVING {h.dk}"
        return Query(f"SELECT {pg} FROM {fpg}{wp}{gp}", f"SELECT {dk} FROM {fdk}{wd}{gd}", cols, shape)

    def having(self, sc: Scope, keys: list[E]) -> E:
        r = self.r
        form = r.choice(["count", "sum", "key", "minmax"])
        if form == "key" and keys:
            k = r.choice(keys)
            return fmt("({0} IS NOT NULL)", "bool", k)
        if form == "sum":
            x = self.g.expr(r.choice(NUMS), sc, 0)
            return fmt(f"(sum({{0}}) {r.choice(['>', '<', '<>'])} {{1}})", "bool", x, self.g.literal("int"))
        if form == "minmax":
            t = r.choice(["int", "varchar", "timestamp"])
            x = self.g.expr(t, sc, 0)
            return fmt(
                f"({r.choice(['min', 'max'])}({{0}}) {r.choice(['>', '<='])} {{1}})",
                "bool",
                x,
                self.g.literal(t),
            )
        return E.same(f"(count(*) {r.choice(['>', '>=', '<'])} {r.randint(1, 3)})", "bool")

    def q_agg(self, depth: int) -> Query:
        s = self.src(depth)
        return self.group_by(self.scope(s), s.pg, s.dk, "agg")

    def q_join_agg(self, depth: int) -> Query:
        fpg, fdk, sc, kind = self.join_src(depth)
        return self.group_by(sc, fpg, fdk, "join_agg", comma=kind == "comma")

    def scalar_agg_subquery(self, outer: Scope, correlated: bool) -> tuple[E, bool]:
        inner = self.src_named()
        is_ = self.scope(inner)
        agg = self.g.agg(is_)
        while agg.t == "array":
            agg = self.g.agg(is_)
        conds_pg, conds_dk = [], []
        if correlated:
            a, b = self.equi(outer, is_)
            conds_pg.append(f"{b.pg} = {a.pg}")
            conds_dk.append(f"{b.dk} = {a.dk}")
        if self.g.chance(0.4):
            p = self.g.pred(is_, 1)
            conds_pg.append(p.pg)
            conds_dk.append(p.dk)
        wp = f" WHERE {' AND '.join(conds_pg)}" if conds_pg else ""
        wd = f" WHERE {' AND '.join(conds_dk)}" if conds_dk else ""
        # count(*) + 1 and friends over a correlated group: the empty group's value matters
        wrap = self.g.chance(0.2) and agg.t in ("bigint",)
        body_pg, body_dk = (f"{agg.pg} + 1", f"{agg.dk} + 1") if wrap else (agg.pg, agg.dk)
        e = E(f"(SELECT {body_pg} FROM {inner.pg}{wp})", f"(SELECT {body_dk} FROM {inner.dk}{wd})", agg.t)
        return e, wrap

    def q_scalar_subquery(self, depth: int) -> Query:
        outer = self.src(depth)
        os_ = self.scope(outer)
        sub, _ = self.scalar_agg_subquery(os_, correlated=False)
        if self.g.chance(0.5) and category(sub.t) in ("num", "varchar", "time"):
            x = self.g.expr(self.g.same_category(sub.t, os_) if category(sub.t) != "num" else "int", os_, 1)
            if category(x.t) != category(sub.t):
                x = self.g.literal(sub.t)
            op = self.r.choice(["<", ">=", "<>"])
            pg, dk, cols = self.aliased(self.select_list(os_))
            return Query(
                f"SELECT {pg} FROM {outer.pg} WHERE {x.pg} {op} {sub.pg}",
                f"SELECT {dk} FROM {outer.dk} WHERE {x.dk} {op} {sub.dk}",
                cols,
                "scalar_subquery",
            )
        pg, dk, cols = self.aliased([*self.select_list(os_), sub])
        return Query(f"SELECT {pg} FROM {outer.pg}", f"SELECT {dk} FROM {outer.dk}", cols, "scalar_subquery")

    def q_correlated(self, depth: int) -> Query:
        outer = self.src_named()
        os_ = self.scope(outer)
        sub, _wrapped = self.scalar_agg_subquery(os_, correlated=True)
        pg, dk, cols = self.aliased([*self.select_list(os_), sub])
        wp, wd = self.where(os_, 0.3)
        return Query(
            f"SELECT {pg} FROM {outer.pg}{wp}", f"SELECT {dk} FROM {outer.dk}{wd}", cols, "correlated"
        )

    # issue 14 part B's shapes live in sqlgen_breadth.py (imported here: it imports this module)
    def q_set_op(self, depth: int) -> Query:
        from sqlgen_breadth import q_set_op

        return q_set_op(self, depth)

    def q_srf(self, depth: int) -> Query:
        from sqlgen_breadth import q_srf

        return q_srf(self, depth)

    def q_window_frame(self, depth: int) -> Query:
        from sqlgen_breadth import q_window_frame

        return q_window_frame(self, depth)

    def q_distinct_on(self, depth: int) -> Query:
        from sqlgen_breadth import q_distinct_on

        return q_distinct_on(self, depth)

    def q_union(self, depth: int) -> Query:
        n = self.r.randint(1, 3)
        types = [self.r.choice(TYPES) for _ in range(n)]
        branches = []
        for _ in range(self.r.choice([2, 2, 3])):
            s = self.src(depth)
            sc = self.scope(s)
            exprs = [self.g.expr(t, sc, 1) for t in types]
            pg, dk, _cols = self.aliased(exprs)
            wp, wd = self.where(sc, 0.5)
            branches.append((f"SELECT {pg} FROM {s.pg}{wp}", f"SELECT {dk} FROM {s.dk}{wd}"))
        op = self.r.choice([" UNION ALL ", " UNION ALL ", " UNION "])
        return Query(
            op.join(b[0] for b in branches),
            op.join(b[1] for b in branches),
            [Column(f"c{i}", t) for i, t in enumerate(types)],
            "union",
        )

    def q_distinct(self, depth: int) -> Query:
        s = self.src(depth)
        sc = self.scope(s)
        exprs = []
        for _ in range(self.r.randint(1, 3)):
            cands = [(a, c) for a, c in sc if c.t in ("int", "varchar", "bool", "date")]
            if cands and self.g.chance(0.7):
                a, c = self.r.choice(cands)
                exprs.append(ref(a, c))
            else:
                exprs.append(self.g.expr(self.r.choice(["int", "varchar", "bool"]), sc, 1))
        pg, dk, cols = self.aliased(exprs)
        wp, wd = self.where(sc, 0.4)
        return Query(
            f"SELECT DISTINCT {pg} FROM {s.pg}{wp}", f"SELECT DISTINCT {dk} FROM {s.dk}{wd}", cols, "distinct"
        )

    def order_by(self, cols: list[str]) -> str:
        """Every column, each in a random direction and NULL placement (a total order on rows)."""
        parts = []
        for c in cols:
            d = self.r.choice(["", " DESC", " ASC NULLS FIRST", " DESC NULLS LAST"])
            parts.append(f"{c}{d}")
        return ", ".join(parts)

    def q_topn(self, depth: int) -> Query:
        s = self.src(depth)
        sc = self.scope(s)
        pg, dk, cols = self.aliased(self.select_list(sc, self.r.randint(1, 3)))
        wp, wd = self.where(sc, 0.4)
        order = self.order_by([c.name for c in self.r.sample(cols, len(cols))])
        limit = f" LIMIT {self.r.randint(1, 5)}"
        if self.g.chance(0.3):
            limit += f" OFFSET {self.r.randint(1, 3)}"
        return Query(
            f"SELECT {pg} FROM {s.pg}{wp} ORDER BY {order}{limit}",
            f"SELECT {dk} FROM {s.dk}{wd} ORDER BY {order}{limit}",
            cols,
            "topn",
        )

    def q_group_topn(self, depth: int) -> Query:
        s = self.src(depth)
        sc = self.scope(s)
        exprs = self.select_list(sc, self.r.randint(2, 4))
        n_part = self.r.randint(1, len(exprs) - 1)
        part, rest = exprs[:n_part], exprs[n_part:]
        dirs = [self.r.choice(["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]) for _ in rest]
        pg_over = (
            f"PARTITION BY {', '.join(p.pg for p in part)} "
            f"ORDER BY {', '.join(e.pg + d for e, d in zip(rest, dirs, strict=True))}"
        )
        dk_over = (
            f"PARTITION BY {', '.join(p.dk for p in part)} "
            f"ORDER BY {', '.join(e.dk + d for e, d in zip(rest, dirs, strict=True))}"
        )
        pg, dk, cols = self.aliased(exprs)
        wp, wd = self.where(sc, 0.3)
        n = self.r.randint(1, 3)
        filt = self.r.choice([f"rn <= {n}", f"rn < {n + 1}", "rn = 1" if n == 1 else f"rn <= {n}"])
        show_rn = self.g.chance(0.3)
        outer = ", ".join(c.name for c in cols) + (", rn" if show_rn else "")
        out_cols = cols + ([Column("rn", "bigint")] if show_rn else [])
        return Query(
            f"SELECT {outer} FROM (SELECT {pg}, ROW_NUMBER() OVER ({pg_over}) AS rn "
            f"FROM {s.pg}{wp}) AS gt WHERE {filt}",
            f"SELECT {outer} FROM (SELECT {dk}, ROW_NUMBER() OVER ({dk_over}) AS rn "
            f"FROM {s.dk}{wd}) AS gt WHERE {filt}",
            out_cols,
            "group_topn",
        )

    def q_over_window(self, depth: int) -> Query:
        """Ranking window functions selected (and maybe filtered): ORDER BY every other output
        column, so rank / dense_rank are exact and row numbers of tied rows go to identical rows."""
        s = self.src(depth)
        sc = self.scope(s)
        exprs = self.select_list(sc, self.r.randint(2, 4))
        n_part = self.r.randint(0, len(exprs) - 1)
        part, rest = exprs[:n_part], exprs[n_part:]
        dirs = [self.r.choice(["", " DESC", " NULLS FIRST", " DESC NULLS LAST"]) for _ in rest]

        def over(d: str) -> str:
            es = [getattr(e, d) for e in exprs]
            p = f"PARTITION BY {', '.join(es[:n_part])} " if part else ""
            o = ", ".join(e + x for e, x in zip(es[n_part:], dirs, strict=True))
            return f"{p}ORDER BY {o}"

        fns = [self.r.choice(["ROW_NUMBER()", "rank()", "dense_rank()"]) for _ in range(self.r.randint(1, 2))]
        pg, dk, cols = self.aliased(exprs)
        wp, wd = self.where(sc, 0.3)
        w_pg = ", ".join(f"{f} OVER ({over('pg')}) AS w{i}" for i, f in enumerate(fns))
        w_dk = ", ".join(f"{f} OVER ({over('dk')}) AS w{i}" for i, f in enumerate(fns))
        out_cols = cols + [Column(f"w{i}", "bigint") for i in range(len(fns))]
        inner_pg = f"SELECT {pg}, {w_pg} FROM {s.pg}{wp}"
        inner_dk = f"SELECT {dk}, {w_dk} FROM {s.dk}{wd}"
        if self.g.chance(0.5):
            return Query(inner_pg, inner_dk, out_cols, "over_window")
        names = ", ".join(c.name for c in out_cols)
        filt = f"w0 <= {self.r.randint(1, 3)}"
        return Query(
            f"SELECT {names} FROM ({inner_pg}) AS ow WHERE {filt}",
            f"SELECT {names} FROM ({inner_dk}) AS ow WHERE {filt}",
            out_cols,
            "over_window",
        )

    def q_window(self, depth: int) -> Query:
        if not any(c.t == "timestamp" for x in self.relations for c in x.usable):
            return self.q_agg(depth)
        rel = self.rel(need_ts=True)
        ts = self.r.choice([c for c in rel.cols if c.t == "timestamp"])
        w = self.g.alias("w")
        base = [(w, c) for c in rel.usable]
        wcols = [Column("window_start", "timestamp"), Column("window_end", "timestamp")]
        sc = base + [(w, c) for c in wcols]
        if self.g.chance(0.5):
            size = self.r.choice([10, 15, 30, 60])
            us = size * 60_000_000
            pg_from = f"TUMBLE({rel.name}, {ts.name}, INTERVAL '{size} minutes') AS {w}"
            start = f"make_timestamp(epoch_us({ts.name}) // {us} * {us})"
            dk_from = (
                f"(SELECT *, {start} AS window_start, {start} + INTERVAL '{size} minutes' AS window_end "
                f"FROM {rel.name}) AS {w}"
            )
        else:
            slide = self.r.choice([5, 10, 15])
            k = self.r.choice([2, 3])
            size = slide * k
            us = slide * 60_000_000
            pg_from = (
                f"HOP({rel.name}, {ts.name}, INTERVAL '{slide} minutes', INTERVAL '{size} minutes') AS {w}"
            )
            start = f"make_timestamp(epoch_us({ts.name}) // {us} * {us} - hop_r.i * {us})"
            dk_from = (
                f"(SELECT {rel.name}.*, {start} AS window_start, "
                f"{start} + INTERVAL '{size} minutes' AS window_end "
                f"FROM {rel.name}, range({k}) AS hop_r(i) WHERE {ts.name} IS NOT NULL) AS {w}"
            )
        if self.g.chance(0.75):
            keys = [ref(w, wcols[0])] + ([ref(w, wcols[1])] if self.g.chance(0.5) else [])
            if self.g.chance(0.3):
                cands = [(a, c) for a, c in base if c.name == "g" or c.t in ("varchar", "bool")]
                if cands:
                    a, c = self.r.choice(cands)
                    keys.append(ref(a, c))
            aggs = [self.g.agg(base) for _ in range(self.r.randint(1, 2))]
            pg, dk, cols = self.aliased(keys + aggs)
            wp, wd = self.where(sc, 0.3)
            gp = ", ".join(k.pg for k in keys)
            return Query(
                f"SELECT {pg} FROM {pg_from}{wp} GROUP BY {gp}",
                f"SELECT {dk} FROM {dk_from}{wd} GROUP BY {gp}",
                cols,
                "window",
            )
        pg, dk, cols = self.aliased([ref(w, wcols[0]), ref(w, wcols[1]), *self.select_list(base, 2)])
        return Query(f"SELECT {pg} FROM {pg_from}", f"SELECT {dk} FROM {dk_from}", cols, "window")

    def q_cte(self, depth: int) -> Query:
        inner = self.query(0, shapes=("project", "agg", "join", "distinct"))
        name = self.g.alias("cte")
        rel = Relation(name, inner.cols, "cte")
        saved = self.relations
        self.relations = [*saved, rel, rel]
        try:
            a = self.src_named(rel)
            other = self.src_named()
            sc = self.scope(a)
            if self.g.chance(0.5):
                x, y = self.equi(sc, self.scope(other))
                sc = sc + self.scope(other)
                body_pg = f"FROM {a.pg} JOIN {other.pg} ON {x.pg} = {y.pg}"
                body_dk = f"FROM {a.dk} JOIN {other.dk} ON {x.dk} = {y.dk}"
            else:
                body_pg, body_dk = f"FROM {a.pg}", f"FROM {a.dk}"
            pg, dk, cols = self.aliased(self.select_list(sc))
        finally:
            self.relations = saved
        return Query(
            f"WITH {name} AS ({inner.pg}) SELECT {pg} {body_pg}",
            f"WITH {name} AS ({inner.dk}) SELECT {dk} {body_dk}",
            cols,
            "cte",
            inner.may_be_unsupported,
        )

    def q_subquery_from(self, depth: int) -> Query:
        inner = self.query(0, shapes=("agg", "join", "union", "distinct", "project"))
        a = self.g.alias("q")
        sc = [(a, c) for c in inner.cols if c.t in TYPES]
        if not sc:
            return self.q_project(depth)
        pg, dk, cols = self.aliased(self.select_list(sc))
        wp, wd = self.where(sc, 0.5)
        return Query(
            f"SELECT {pg} FROM ({inner.pg}) AS {a}{wp}",
            f"SELECT {dk} FROM ({inner.dk}) AS {a}{wd}",
            cols,
            "subquery_from",
        )

    def q_natural_using(self, depth: int) -> Query:
        """NATURAL JOIN or JOIN ... USING between two derived tables whose shared column names
        (u0, u1) are chosen, next to their own (l0.., r0..): `*` lists the merged columns first
        (PostgreSQL's order, spelled out for DuckDB), or the merged column is selected
        unqualified beside the inputs it merges; NATURAL without shared names is a cross join."""
        left, right = self.src(depth), self.src(depth)
        ls, rs = self.scope(left), self.scope(right)
        natural = self.g.chance(0.5)
        n_shared = self.r.choice([0, 1, 1, 2] if natural else [1, 1, 2])
        shared = [_same_time_type(*self.equi(ls, rs)) for _ in range(n_shared)]
        own_l = [self.g.expr(self.g.any_type(ls), ls, 1) for _ in range(self.r.randint(1, 2))]
        own_r = [self.g.expr(self.g.any_type(rs), rs, 1) for _ in range(self.r.randint(1, 2))]

        def side(src: Src, shared_exprs: list[E], own: list[E], prefix: str, alias: str, d: str) -> str:
            items = [f"{getattr(e, d)} AS u{i}" for i, e in enumerate(shared_exprs)]
            items += [f"{getattr(e, d)} AS {prefix}{i}" for i, e in enumerate(own)]
            return f"(SELECT {', '.join(items)} FROM {getattr(src, d)}) AS {alias}"

        x, y = self.g.alias("x"), self.g.alias("y")
        kind = self.r.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"])
        lp, ld = (side(left, [a for a, _ in shared], own_l, "l", x, d) for d in ("pg", "dk"))
        rp, rd = (side(right, [b for _, b in shared], own_r, "r", y, d) for d in ("pg", "dk"))
        using = ", ".join(f"u{i}" for i in range(n_shared))
        if natural:
            from_pg = f"{lp} NATURAL {kind} {rp}"
            from_dk = f"{ld} NATURAL {kind} {rd}" if shared else f"{ld} {kind} {rd} ON TRUE"
        else:
            from_pg, from_dk = f"{lp} {kind} {rp} USING ({using})", f"{ld} {kind} {rd} USING ({using})"
        merged_t = [_merged_type(a.t, b.t) for a, b in shared]
        own_cols = [Column(f"l{i}", e.t) for i, e in enumerate(own_l)]
        own_cols += [Column(f"r{i}", e.t) for i, e in enumerate(own_r)]
        if not shared or self.g.chance(0.5):
            cols = [Column(f"u{i}", t) for i, t in enumerate(merged_t)] + own_cols
            names = ", ".join(c.name for c in cols)
            return Query(f"SELECT * FROM {from_pg}", f"SELECT {names} FROM {from_dk}", cols, "natural_using")
        i = self.r.randrange(n_shared)
        items = [f"u{i}", f"{x}.u{i} AS xu{i}", f"{y}.u{i} AS yu{i}", *(c.name for c in own_cols)]
        cols = [
            Column(f"u{i}", merged_t[i]),
            Column(f"xu{i}", shared[i][0].t),
            Column(f"yu{i}", shared[i][1].t),
            *own_cols,
        ]
        where = f" WHERE u{i} IS NOT NULL" if self.g.chance(0.3) else ""
        sel = ", ".join(items)
        pg, dk = f"SELECT {sel} FROM {from_pg}{where}", f"SELECT {sel} FROM {from_dk}{where}"
        return Query(pg, dk, cols, "natural_using")

    def q_corresponding(self, depth: int) -> Query:
        """UNION [ALL] CORRESPONDING [BY (...)]: each branch names a random subset of c0..c3 (one
        type per name) in its own order; DuckDB gets the same columns spelled out."""
        types = [self.r.choice(TYPES) for _ in range(4)]
        pool = list(range(4))
        common = self.r.sample(pool, self.r.randint(1, 2))
        branches = []
        for _ in range(2):
            s = self.src(depth)
            sc = self.scope(s)
            picked = common + [c for c in self.r.sample(pool, self.r.randint(0, 2)) if c not in common]
            self.r.shuffle(picked)
            exprs = [(c, self.g.expr(types[c], sc, 1)) for c in picked]
            wp, wd = self.where(sc, 0.4)
            pg = ", ".join(f"{e.pg} AS c{c}" for c, e in exprs)
            dk = ", ".join(f"{e.dk} AS c{c}" for c, e in exprs)
            branches.append((f"SELECT {pg} FROM {s.pg}{wp}", f"SELECT {dk} FROM {s.dk}{wd}", picked))
        (lp, ld, lcols), (rp, rd, rcols) = branches
        on_both = [c for c in lcols if c in rcols]
        op = self.r.choice(["UNION ALL", "UNION ALL", "UNION"])
        if self.g.chance(0.4):
            out = self.r.sample(on_both, self.r.randint(1, len(on_both)))
            clause = f"CORRESPONDING BY ({', '.join(f'c{c}' for c in out)})"
        else:
            out, clause = on_both, "CORRESPONDING"
        names = ", ".join(f"c{c}" for c in out)
        b1, b2 = self.g.alias("b"), self.g.alias("b")
        return Query(
            f"{lp} {op} {clause} {rp}",
            f"SELECT {names} FROM ({ld}) AS {b1} {op} SELECT {names} FROM ({rd}) AS {b2}",
            [Column(f"c{c}", types[c]) for c in out],
            "corresponding",
        )


def _same_time_type(a: E, b: E) -> tuple[E, E]:
    """DuckDB types a merged USING column as one side's type (a date stays a date, a DECIMAL keeps
    its scale: -7.5 became -8), PostgreSQL as their common type: both sides are cast to it,
    except integers, which compare and print the same in either type."""
    if {a.t, b.t} <= {"int", "bigint"} or category(a.t) not in ("num", "time"):
        return a, b
    t = _merged_type(a.t, b.t)
    return tuple(E(f"CAST({e.pg} AS {PG_TYPE[t]})", f"CAST({e.dk} AS {DK_TYPE[t]})", t) for e in (a, b))  # type: ignore[return-value]


def _merged_type(a: str, b: str) -> str:
    """The type of a USING column merged from an `a` and a `b` column (PostgreSQL's common type)."""
    if a == b:
        return a
    order = ["int", "bigint", "numeric", "double"]
    if a in order and b in order:
        return order[max(order.index(a), order.index(b))]
    return "timestamp" if {a, b} == {"timestamp", "date"} else a


# -- DML ----------------------------------------------------------------------------------------


@dataclass
class Dml:
    """One DML statement: piestream's text and the DuckDB statements with the same effect."""

    pg: str
    dk: list[str]
    table: str
    kind: str  # insert, insert_select, update, delete


def dml(g: Gen, t: Relation, *, allow_read: bool = True) -> Dml:
    r = g.r
    kinds = ["insert", "insert", "insert"]
    if not t.append_only:
        kinds += ["update", "delete"]
    if allow_read:
        kinds.append("insert_select")
    kind = r.choice(kinds)
    verb = "INSERT OR IGNORE INTO" if t.pk and t.conflict == "ignore" else "INSERT OR REPLACE INTO"
    if not t.pk:
        verb = "INSERT INTO"
    scope: Scope = [(t.name, c) for c in t.cols]
    if kind == "insert":
        cols = [c for c in t.cols if c.name in t.pk or c.name == "g" or g.chance(0.85)]
        rows = [g.row(t) for _ in range(r.randint(1, 4))]
        names = ", ".join(c.name for c in cols)
        vals = ["(" + ", ".join(sql_value(row[c.name], c.t) for c in cols) + ")" for row in rows]
        # the oracle names every column: an upsert replaces the whole row (omitted columns NULL)
        all_names = ", ".join(c.name for c in t.cols)
        full = [
            "(" + ", ".join(sql_value(row[c.name], c.t) if c in cols else "NULL" for c in t.cols) + ")"
            for row in rows
        ]
        return Dml(
            f"INSERT INTO {t.name} ({names}) VALUES {', '.join(vals)}",
            [f"{verb} {t.name} ({all_names}) VALUES {v}" for v in full],
            t.name,
            kind,
        )
    if kind == "insert_select":
        w = g.pred(scope, 1)
        names = ", ".join(c.name for c in t.cols)
        exprs_pg, exprs_dk = [], []
        for c in t.cols:  # the same rows again, a non-key column perhaps changed
            if c.name in t.pk or g.chance(0.6):
                exprs_pg.append(f"{t.name}.{c.name}")
                exprs_dk.append(f"{t.name}.{c.name}")
            else:
                e = g.expr(c.t, scope, 1)
                exprs_pg.append(e.pg)
                exprs_dk.append(e.dk)
        return Dml(
            f"INSERT INTO {t.name} ({names}) SELECT {', '.join(exprs_pg)} FROM {t.name} WHERE {w.pg}",
            [f"{verb} {t.name} ({names}) SELECT {', '.join(exprs_dk)} FROM {t.name} WHERE {w.dk}"],
            t.name,
            kind,
        )
    w = g.pred(scope, 1)
    if kind == "delete":
        return Dml(f"DELETE FROM {t.name} WHERE {w.pg}", [f"DELETE FROM {t.name} WHERE {w.dk}"], t.name, kind)
    targets = [c for c in t.cols if c.name not in t.pk]
    sets = r.sample(targets, r.randint(1, min(2, len(targets))))
    assigns = [(c, g.expr(c.t, scope, 1)) for c in sets]
    return Dml(
        f"UPDATE {t.name} SET {', '.join(f'{c.name} = {e.pg}' for c, e in assigns)} WHERE {w.pg}",
        [f"UPDATE {t.name} SET {', '.join(f'{c.name} = {e.dk}' for c, e in assigns)} WHERE {w.dk}"],
        t.name,
        kind,
    )
