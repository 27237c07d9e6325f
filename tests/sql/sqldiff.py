"""The differential runner: piestream vs DuckDB over one random seed.

A seed gives a schema, views, MVs (some created before any data, some over existing data, some
over earlier MVs) and a sequence of DML batches. DuckDB keeps a model of the base tables (the
same DML, with RisingWave's upsert semantics spelled as INSERT OR REPLACE / OR IGNORE) and
computes every MV's query from scratch. After every committed epoch: each base table equals its
model, and each MV equals DuckDB's answer. At chosen steps the MV queries also run as batch
SELECTs. At the end each MV is created again over the data that now exists (backfill) and must
equal the one maintained since it was created.
"""

from __future__ import annotations

import datetime as dt
import math
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
from sqlgen import Dml, Gen, Query, QueryGen, Relation, dml, sql_value

from piestream.common.errors import FeatureNotSupported, PiestreamError
from piestream.server.database import Database, DatabaseConfig


def norm_value(v: Any) -> Any:
    """A canonical form: numbers compared to 9 significant digits, booleans distinct from 1/0."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | Decimal):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return str(f)
        if f == 0:
            return 0.0
        return float(f"{f:.9g}")
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None)
    if isinstance(v, list | tuple):
        return tuple(norm_value(x) for x in v)
    if isinstance(v, bytes):
        return v
    return v


def norm_rows(rows: Iterable[Sequence[Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(norm_value(v) for v in r) for r in rows)


def diff_text(got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]], limit: int = 12) -> str:
    extra = got - want
    missing = want - got
    lines = [f"piestream rows: {sum(got.values())}, duckdb rows: {sum(want.values())}"]
    for r, n in list(extra.items())[:limit]:
        lines.append(f"  unexpected x{n}: {r}")
    for r, n in list(missing.items())[:limit]:
        lines.append(f"  missing    x{n}: {r}")
    return "\n".join(lines)


class Mismatch(AssertionError):
    pass


@dataclass
class MV:
    name: str
    q: Query
    created_at: int


@dataclass
class Stats:
    mvs: int = 0
    unsupported: int = 0
    oracle_rejected: int = 0
    checks: int = 0
    nonempty_checks: int = 0
    batch_checks: int = 0
    epochs: int = 0
    shapes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, other: Stats) -> None:
        self.mvs += other.mvs
        self.unsupported += other.unsupported
        self.oracle_rejected += other.oracle_rejected
        self.checks += other.checks
        self.nonempty_checks += other.nonempty_checks
        self.batch_checks += other.batch_checks
        self.epochs += other.epochs
        self.shapes.update(other.shapes)
        self.seconds += other.seconds


def duck_connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET integer_division = true")  # PostgreSQL's int / int
    con.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")  # PostgreSQL's
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET order_by_non_integer_literal = true")  # string_agg('x', ',' ORDER BY 'x')
    return con


class SeedRun:
    """Runs one seed end to end; raises `Mismatch` with a reproduction script on a difference."""

    def __init__(
        self,
        seed: int,
        *,
        n_tables: int = 3,
        n_mvs: int = 6,
        n_steps: int = 8,
        data_dir: str | Path | None = None,
        parallelism: int = 2,
        barrier_interval: float | None = None,
        spark: Any = None,
    ) -> None:
        self.seed = seed
        self.g = Gen(seed)
        self.n_tables = n_tables
        self.n_mvs = n_mvs
        self.n_steps = n_steps
        self.parallelism = parallelism
        self.spark = spark  # a SparkSession: run the epochs on Spark instead of in-process
        # background barriers: mostly rare (DML and FLUSH still end epochs), sometimes frequent
        # enough to split a batch of statements over several epochs
        self.barrier_interval = barrier_interval or self.g.r.choice([0.05, 2.0, 2.0, 2.0])
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="piestream-diff-")
        self.data_dir = Path(data_dir or self._tmp.name)  # type: ignore[union-attr]
        self.script: list[str] = []  # every statement piestream ran, for the reproduction
        self.stats = Stats()
        self.mvs: list[MV] = []
        self.views: list[Relation] = []

    # -- plumbing -------------------------------------------------------------------------------
    def pe(self, sql: str) -> Any:
        self.script.append(sql + ";")
        return self.s.execute(sql)

    def fail(self, what: str) -> None:
        script = "\n".join(self.script)
        raise Mismatch(
            f"seed {self.seed}: {what}\n-- reproduction ({len(self.script)} statements):\n{script}"
        )

    def pe_rows(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.s.execute(sql)[-1].rows)

    # -- main -----------------------------------------------------------------------------------
    def run(self) -> Stats:
        started = time.perf_counter()
        cfg = DatabaseConfig(
            runner="spark" if self.spark is not None else "local",
            barrier_interval=self.barrier_interval,
            parallelism=self.parallelism,
        )
        self.db = Database(self.data_dir, spark=self.spark, config=cfg)
        self.duck = duck_connect()
        try:
            self.s = self.db.session()
            self._run()
        finally:
            self.db.close()
            self.duck.close()
            if self._tmp is not None:
                self._tmp.cleanup()
        self.stats.seconds = time.perf_counter() - started
        return self.stats

    def create_tables(self) -> None:
        """The seed's schema, in piestream and in DuckDB."""
        self.tables = self.g.schema(self.n_tables)
        for t in self.tables:
            pg, dk = self.g.create_table_sql(t)
            self.pe(pg)
            self.duck.execute(dk)

    def _run(self) -> None:
        g = self.g
        self.create_tables()
        for t in self.tables:
            if g.chance(0.3):  # batch point / range lookups may go through it
                self.pe(f"CREATE INDEX {t.name}_g ON {t.name} (g)")
        if g.chance(0.5):
            self.create_view()
        # MVs: about half before any data, the rest spread over the steps
        plan = sorted(g.r.randint(0, self.n_steps - 1) if g.chance(0.5) else -1 for _ in range(self.n_mvs))
        batch_steps = {self.n_steps // 2, self.n_steps - 1}
        for mv_step in [p for p in plan if p < 0]:
            self.create_mv(mv_step)
        self.check_all(batch=False)
        for step in range(self.n_steps):
            for _ in [p for p in plan if p == step]:
                self.create_mv(step)
            self.dml_step()
            self.check_all(batch=step in batch_steps)
        self.check_backfill()
        self.drop_all()

    # -- DDL ------------------------------------------------------------------------------------
    def relations(self) -> list[Relation]:
        return [*self.tables, *self.views, *(Relation(mv.name, mv.q.cols, "mv") for mv in self.mvs)]

    def create_view(self) -> None:
        qg = QueryGen(self.g, list(self.tables))
        q = qg.query(0, shapes=("project", "agg", "join", "union"))
        name = f"v{len(self.views)}"
        if not self.try_create("VIEW", name, q):
            return
        self.views.append(Relation(name, q.cols, "view"))

    def create_mv(self, step: int) -> None:
        rels = self.relations()
        qg = QueryGen(self.g, rels if self.g.chance(0.7) else [*self.tables, *self.views])
        q = qg.query(1)
        name = f"mv{len(self.mvs)}"
        if self.try_create("MATERIALIZED VIEW", name, q):
            self.mvs.append(MV(name, q, step))
            self.stats.mvs += 1
            self.stats.shapes[q.shape] += 1

    def try_create(self, kind: str, name: str, q: Query) -> bool:
        try:
            self.duck.execute(f"CREATE VIEW {name} AS {q.dk}")
        except duckdb.Error:
            self.stats.oracle_rejected += 1  # the generator made something DuckDB refuses
            return False
        try:
            self.pe(f"CREATE {kind} {name} AS {q.pg}")
        except FeatureNotSupported as e:
            self.script.pop()
            self.duck.execute(f"DROP VIEW {name}")
            if q.may_be_unsupported:
                self.stats.unsupported += 1
                return False
            self.fail(f"CREATE {kind} {name} failed with 0A000: {e}\n{q.pg}")
        except PiestreamError as e:
            self.fail(f"CREATE {kind} {name} failed: [{e.sqlstate}] {e}\n{q.pg}\n-- duckdb: {q.dk}")
        return True

    def drop_all(self) -> None:
        for t in self.tables:
            self.pe(f"DROP TABLE {t.name} CASCADE")
        left = self.pe_rows("SHOW TABLES") + self.pe_rows("SHOW MATERIALIZED VIEWS")
        if left:
            self.fail(f"DROP TABLE ... CASCADE left {left}")

    # -- DML ------------------------------------------------------------------------------------
    def dml_step(self) -> None:
        g = self.g
        if g.chance(0.6):
            d = dml(g, g.r.choice(self.tables))
            self.apply(d)
        else:
            # several statements in one epoch: per table, at most one UPDATE / DELETE and it comes
            # first (each statement reads the last committed snapshot, not its predecessors)
            self.pe("SET implicit_flush = false")
            touched: set[str] = set()
            for _ in range(g.r.randint(2, 5)):
                t = g.r.choice(self.tables)
                d = dml(g, t, allow_read=False)
                if d.kind != "insert" and t.name in touched:
                    continue
                touched.add(t.name)
                self.apply(d)
            self.pe("FLUSH")
            self.pe("SET implicit_flush = true")
        self.stats.epochs += 1

    def apply(self, d: Dml) -> None:
        try:
            self.pe(d.pg)
        except PiestreamError as e:
            self.fail(f"DML failed: [{e.sqlstate}] {e}\n{d.pg}")
        for stmt in d.dk:
            self.duck.execute(stmt)

    # -- checks ---------------------------------------------------------------------------------
    def check_all(self, *, batch: bool) -> None:
        for t in self.tables:
            names = ", ".join(c.name for c in t.cols)
            got = norm_rows(self.pe_rows(f"SELECT {names} FROM {t.name}"))
            want = norm_rows(self.duck.execute(f"SELECT {names} FROM {t.name}").fetchall())
            if got != want:
                self.fail(f"table {t.name} differs from its model\n{diff_text(got, want)}")
        for mv in self.mvs:
            self.check_mv(mv)
            if batch:
                self.check_batch(mv)
        if batch:
            self.check_lookups()

    def check_lookups(self) -> None:
        """Batch SELECTs whose WHERE pins or bounds the pk or an indexed column."""
        g = self.g
        for t in self.tables:
            names = ", ".join(c.name for c in t.cols)
            key = t.cols[0]
            v = g.key_value(key.t) if key.name in t.pk else g.value(key.t, 0.0)
            lit = sql_value(v, key.t)
            for where in (
                f"{key.name} = {lit}",
                f"{key.name} >= {lit}",
                f"{key.name} < {lit} AND g IS NOT NULL",
                f"g = {g.r.randint(0, 4)}",
                f"g BETWEEN 1 AND 3 AND {key.name} <> {lit}",
            ):
                q = f"SELECT {names} FROM {t.name} WHERE {where}"
                got = norm_rows(self.pe_rows(q))
                want = norm_rows(self.duck.execute(q).fetchall())
                self.stats.batch_checks += 1
                if got != want:
                    self.fail(f"batch lookup differs\n{q}\n{diff_text(got, want)}")

    def expected(self, mv: MV) -> Counter[tuple[Any, ...]]:
        return norm_rows(self.duck.execute(mv.q.dk).fetchall())

    def check_mv(self, mv: MV) -> None:
        names = ", ".join(c.name for c in mv.q.cols)
        got = norm_rows(self.pe_rows(f"SELECT {names} FROM {mv.name}"))
        want = self.expected(mv)
        self.stats.checks += 1
        self.stats.nonempty_checks += bool(want)
        if got != want:
            self.fail(f"MV {mv.name} ({mv.q.shape}) differs from DuckDB\n{mv.q.pg}\n{diff_text(got, want)}")

    def check_batch(self, mv: MV) -> None:
        try:
            got = norm_rows(self.pe_rows(mv.q.pg))
        except PiestreamError as e:
            self.fail(f"batch SELECT of {mv.name} failed: [{e.sqlstate}] {e}\n{mv.q.pg}")
        want = self.expected(mv)
        self.stats.batch_checks += 1
        if got != want:
            self.fail(f"batch SELECT of {mv.name} ({mv.q.shape}) differs\n{mv.q.pg}\n{diff_text(got, want)}")

    def check_backfill(self) -> None:
        for mv in self.mvs:
            names = ", ".join(c.name for c in mv.q.cols)
            try:
                self.pe(f"CREATE MATERIALIZED VIEW {mv.name}_bf AS {mv.q.pg}")
            except PiestreamError as e:
                self.fail(f"re-creating {mv.name} failed: [{e.sqlstate}] {e}\n{mv.q.pg}")
            fresh = norm_rows(self.pe_rows(f"SELECT {names} FROM {mv.name}_bf"))
            kept = norm_rows(self.pe_rows(f"SELECT {names} FROM {mv.name}"))
            if fresh != kept:
                self.fail(
                    f"backfilled {mv.name}_bf differs from {mv.name} maintained since step "
                    f"{mv.created_at}\n{mv.q.pg}\n{diff_text(fresh, kept)}"
                )


def run_seeds(seeds: Iterable[int], **kw: Any) -> Stats:
    total = Stats()
    for seed in seeds:
        total.add(SeedRun(seed, **kw).run())
    return total


def check_cases_with_rounds(
    s: Any,
    schema: Sequence[str],
    cases: Sequence[tuple[str, str, str | None]],
    rounds: Sequence[Sequence[str]],
    *,
    batch: bool = True,
    duck_schema: Sequence[str] | None = None,
    one_epoch_per_round: bool = False,
) -> set[str]:
    """Each case `(name, piestream SQL, DuckDB SQL or None for the same)` as an MV created before
    any data, then after every round of DML: the MV (and, with `batch`, the query as a SELECT)
    equals DuckDB's answer over the same tables. With `one_epoch_per_round` a round is one
    transaction (one epoch, its statements seeing each other's changes) instead of an epoch per
    statement. Returns the cases whose answer was ever non-empty."""
    duck = duck_connect()
    for i, stmt in enumerate(schema):
        s.execute(stmt)
        duck.execute(duck_schema[i] if duck_schema is not None else stmt)
    for name, pg, _ in cases:
        s.execute(f"CREATE MATERIALIZED VIEW {name} AS {pg}")
    nonempty: set[str] = set()

    def check(when: str) -> None:
        for name, pg, dk in cases:
            want = norm_rows(duck.execute(dk or pg).fetchall())
            if want:
                nonempty.add(name)
            results = [("MV", s.execute(f"SELECT * FROM {name}")[-1].rows)]
            if batch:
                results.append(("batch", s.execute(pg)[-1].rows))
            for what, got_rows in results:
                got = norm_rows(got_rows)
                assert got == want, f"{what} {name} {when}\n{pg}\n{diff_text(got, want)}"

    check("before any data")
    for i, round_ in enumerate(rounds):
        if one_epoch_per_round:
            s.execute("BEGIN")
        for stmt in round_:
            s.execute(stmt)
            duck.execute(stmt)
        if one_epoch_per_round:
            s.execute("COMMIT")
        check(f"after round {i}")
    duck.close()
    return nonempty
