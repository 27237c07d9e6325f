"""Long randomized DDL + DML sessions on the Spark runner, hunting state inconsistencies.

A session mixes CREATE / DROP MATERIALIZED VIEW (MVs over tables and over other MVs, DROP with
and without CASCADE), DROP TABLE ... CASCADE and CREATE TABLE again under the same name (tables
with and without primary keys, append-only ones), and DML, while the barrier loop runs epochs in
the background every few hundred milliseconds, so DDL keeps landing between and beside epochs.
State-table consistency checks stay strict: an inconsistent operation (a double insert, a delete
of a missing key) fails its epoch. After every step:

* no epoch failed, in the background or under a statement;
* every table equals its DuckDB model and every MV equals DuckDB's answer to its query;
* the catalog lists exactly the MVs the session expects (CASCADE removed the dependents, a DROP
  without CASCADE of an MV with dependents was refused with 2BP01).

CI runs a short session on Spark and a longer one in-process; ``--soak`` runs long sessions on
Spark. A failure prints the seed and a SQL script reproducing it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqldiff import MV, SeedRun, Stats
from sqlgen import QueryGen, Relation, dml

from piestream.common.errors import PiestreamError
from piestream.runtime.runners import epoch_error


class DdlSession(SeedRun):
    """One seed's session: `n_steps` random actions, each followed by the full check."""

    def _run(self) -> None:
        g = self.g
        self.create_tables()
        for t in self.tables:
            self.fill(t)
        self.db.barriers.last_error = None
        for _ in range(self.n_steps):
            action = g.r.choices(["create_mv", "drop_mv", "dml", "recreate_table"], [4, 2, 5, 1])[0]
            if action == "create_mv" or (not self.mvs and action == "drop_mv"):
                self.create_mv(0)
            elif action == "drop_mv":
                self.drop_mv()
            elif action == "recreate_table":
                self.recreate_table()
            else:
                self.dml_step()
            self.check_epochs()
            self.check_catalog()
            self.check_all(batch=False)
        self.drop_all()

    # -- actions --------------------------------------------------------------------------------
    def drop_mv(self) -> None:
        mv = self.g.r.choice(self.mvs)
        dependents = [m for m in self.mvs if m is not mv and _reads(m, mv.name)]
        cascade = self.g.chance(0.5)
        try:
            self.pe(f"DROP MATERIALIZED VIEW {mv.name}{' CASCADE' if cascade else ''}")
        except PiestreamError as e:
            if cascade or not dependents or e.sqlstate != "2BP01":
                self.fail(f"DROP MATERIALIZED VIEW {mv.name} failed: [{e.sqlstate}] {e}")
            self.script.pop()
            return
        if dependents and not cascade:
            self.fail(f"DROP MATERIALIZED VIEW {mv.name} without CASCADE dropped an MV others read")
        self.forget_dropped()

    def recreate_table(self) -> None:
        g = self.g
        old = g.r.choice(self.tables)
        self.pe(f"DROP TABLE {old.name} CASCADE")
        self.duck.execute(f"DROP TABLE {old.name}")
        self.forget_dropped()
        new = g.schema(1)[0]
        new.name = old.name
        pg, dk = g.create_table_sql(new)
        self.pe(pg)
        self.duck.execute(dk)
        self.tables = [new if t is old else t for t in self.tables]
        self.fill(new)

    def fill(self, t: Relation) -> None:
        """A few inserts, so that most MVs hold rows."""
        for _ in range(3):
            d = dml(self.g, t, allow_read=False)
            while d.kind != "insert":
                d = dml(self.g, t, allow_read=False)
            self.apply(d)

    def forget_dropped(self) -> None:
        """Sync the session's MVs with the catalog after a DROP (CASCADE may take several)."""
        live = {r[0] for r in self.pe_rows("SHOW MATERIALIZED VIEWS")}
        for mv in [m for m in self.mvs if m.name not in live]:
            self.duck.execute(f"DROP VIEW IF EXISTS {mv.name}")
        self.mvs = [m for m in self.mvs if m.name in live]

    def create_mv(self, step: int) -> None:
        rels = self.relations()
        q = QueryGen(self.g, rels).query(1)
        name = f"mv{self.stats.mvs + self.stats.unsupported + self.stats.oracle_rejected}"
        if self.try_create("MATERIALIZED VIEW", name, q):
            self.mvs.append(MV(name, q, step))
            self.stats.mvs += 1
            self.stats.shapes[q.shape] += 1

    def dml_step(self) -> None:
        g = self.g
        for _ in range(g.r.randint(1, 3)):
            self.apply(dml(g, g.r.choice(self.tables)))
        self.stats.epochs += 1

    # -- checks ---------------------------------------------------------------------------------
    def check_epochs(self) -> None:
        err = self.db.barriers.last_error
        if err is not None:
            cause, fragment = epoch_error(err)
            self.fail(f"an epoch failed (fragment {fragment}): [{cause.sqlstate}] {cause.message}")

    def check_catalog(self) -> None:
        live = sorted(r[0] for r in self.pe_rows("SHOW MATERIALIZED VIEWS"))
        want = sorted(m.name for m in self.mvs)
        if live != want:
            self.fail(f"the catalog lists MVs {live}, the session expects {want}")


def _reads(mv: MV, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", mv.q.pg) is not None


def run_sessions(seeds: range, n_steps: int, spark: Any = None, barrier_interval: float = 0.2) -> Stats:
    total = Stats()
    for seed in seeds:
        total.add(
            DdlSession(
                seed, n_tables=3, n_steps=n_steps, spark=spark, barrier_interval=barrier_interval
            ).run()
        )
    print(f"\nDDL sessions {seeds.start}-{seeds.stop - 1} ({n_steps} steps each): {total}")
    return total


def test_ddl_sessions_in_process() -> None:
    total = run_sessions(range(3), n_steps=25, barrier_interval=0.02)
    assert total.mvs >= 10 and total.checks >= 100, total


@pytest.mark.spark
def test_ddl_session_on_spark(spark: Any) -> None:
    total = run_sessions(range(50, 51), n_steps=10, spark=spark)
    assert total.mvs >= 3 and total.checks >= 10, total


@pytest.mark.soak
def test_ddl_sessions_on_spark_soak(spark: Any) -> None:
    run_sessions(range(1000, 1030), n_steps=60, spark=spark)


@pytest.mark.soak
def test_ddl_sessions_in_process_soak() -> None:
    run_sessions(range(2000, 2200), n_steps=80, barrier_interval=0.01)
