"""Recovery: SIGKILL at random points, and a clean close + reopen.

A child process (`crash_child.py`) opens a data directory and runs SQL statements one at a time,
printing each before it runs and again once it returned (acknowledged). The test kills the
child's whole process group with SIGKILL at a random moment, reopens the same directory and
checks: the catalog is intact; the tables hold every acknowledged statement exactly once, plus
at most the one statement that was in flight (applied or not, never half); every MV equals
DuckDB's result over exactly the statements the tables show; new DML works. Several kills run in
a row on the same directory, so recovery of a recovered database is covered too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from crash_child import EXTRA_MV_QUERY
from sql_workload import (
    MVS,
    TABLES,
    Reference,
    mismatches,
    mv_statements,
    piestream_rows,
    schema_statements,
    statement,
)

from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.server.database import Database, DatabaseConfig
from piestream.storage.hummock import SstableStore
from piestream.storage.object_store import InMemoryObjectStore

CHILD = Path(__file__).parent / "crash_child.py"
SEED = 21


def _config(runner: str = "local") -> DatabaseConfig:
    return DatabaseConfig(runner=runner, barrier_interval=0.2, parallelism=2)


@dataclass
class History:
    """What the database must hold: the statements applied so far, and the extra MVs."""

    applied: list[str] = field(default_factory=list)  # DuckDB SQL, in order
    extra_mvs: dict[str, str] = field(default_factory=dict)

    def reference(self, extra: Sequence[str] = ()) -> Reference:
        return Reference([*self.applied, *extra])


@dataclass
class ChildRun:
    sent: dict[int, dict[str, Any]]
    acked: list[int]
    events: list[str]
    stderr: str


def _run_child(
    data_dir: Path, start: int, runner: str, kill_after: float, extra_mv: str | None, min_acks: int = 0
) -> ChildRun:
    """Run the child; `kill_after` seconds after it is ready and has acknowledged `min_acks`
    statements (so a slow machine cannot make the kill land before any work), SIGKILL it."""
    args = [sys.executable, str(CHILD), str(data_dir), str(SEED), str(start), runner]
    if extra_mv:
        args.append(extra_mv)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CHILD.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    lines: list[str] = []
    ready = threading.Event()
    acks = threading.Semaphore(0)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if '"ready"' in line:
                ready.set()
            elif '"ack"' in line:
                acks.release()

    err: list[str] = []
    t_out = threading.Thread(target=read, daemon=True)
    t_err = threading.Thread(
        target=lambda: err.append(proc.stderr.read() if proc.stderr else ""), daemon=True
    )
    t_out.start()
    t_err.start()
    try:
        if not ready.wait(120):
            pytest.fail(f"child never got ready: {''.join(lines)} {proc.poll()}")
        for _ in range(min_acks):
            if not acks.acquire(timeout=120):
                pytest.fail(f"child acknowledged too little: {''.join(lines)[-2000:]} {proc.poll()}")
        time.sleep(kill_after)
        assert proc.poll() is None, f"child died by itself: {''.join(lines)[-2000:]}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the child, its JVM and Spark's Python workers
        proc.wait(30)
    t_out.join(10)
    t_err.join(10)
    sent: dict[int, dict[str, Any]] = {}
    acked: list[int] = []
    events: list[str] = []
    for line in lines:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if "send" in msg:
            sent[msg["send"]] = msg
        elif "ack" in msg:
            acked.append(msg["ack"])
        else:
            events.append(msg["event"])
    return ChildRun(sent, acked, events, "".join(err))


def _create_schema(data_dir: Path, hist: History) -> None:
    db = Database(data_dir, config=_config())
    try:
        s = db.session()
        for ddl in schema_statements():
            s.execute(ddl)
        for i in range(3):
            pg, duck = statement(SEED, 100_000 + i)
            s.execute(pg)
            hist.applied.append(duck)
        for ddl in mv_statements():
            s.execute(ddl)
    finally:
        db.close()


def _base_tables(s: Any) -> dict[str, list]:
    return {t: piestream_rows(s, t) for t in TABLES}


def _check_after_kill(data_dir: Path, hist: History, run: ChildRun, new_dml_start: int) -> str:
    """Reopen, check, add a little DML; returns how the in-flight statement ended."""
    acked = [run.sent[i] for i in run.acked]
    in_flight = [m for i, m in run.sent.items() if i not in set(run.acked)]
    assert len(in_flight) <= 1, in_flight  # one session, one statement at a time
    for m in acked:
        if "ddl" in m:
            hist.extra_mvs[m["ddl"]] = EXTRA_MV_QUERY
        else:
            hist.applied.append(m["duck"])
    db = Database(data_dir, config=_config())
    try:
        s = db.session()
        # the catalog: every table and MV, with its definition
        names = {r.name for r in db.catalog.snapshot().relations()}
        expected = {*TABLES, *MVS, *hist.extra_mvs}
        pending_ddl = [m["ddl"] for m in in_flight if "ddl" in m]
        assert expected <= names <= expected | set(pending_ddl), (names, expected)
        for name, q in MVS.items():
            rel = db.catalog.get(name)
            assert rel is not None and q in rel.definition
        outcome = "none in flight"
        if pending_ddl:
            outcome = "DDL in flight: " + ("created" if pending_ddl[0] in names else "absent")
            if pending_ddl[0] in names:
                hist.extra_mvs[pending_ddl[0]] = EXTRA_MV_QUERY
        elif in_flight:
            # the tables show the acknowledged statements, plus the in-flight one or not
            got = _base_tables(s)
            without, with_ = hist.reference(), hist.reference([in_flight[0]["duck"]])
            try:
                if got == {t: without.table(t) for t in TABLES}:
                    outcome = "DML in flight: not applied"
                elif got == {t: with_.table(t) for t in TABLES}:
                    hist.applied.append(in_flight[0]["duck"])
                    outcome = "DML in flight: applied"
                else:
                    pytest.fail(
                        f"tables match neither the acknowledged statements nor them + the one in "
                        f"flight ({in_flight[0]['sql']}): {got} vs {[without.table(t) for t in TABLES]}"
                    )
            finally:
                without.close()
                with_.close()
        ref = hist.reference()
        try:
            bad = mismatches(s, ref, hist.extra_mvs)
            assert not bad, f"after kill ({outcome}): {bad}"
            # new DML keeps working on the recovered database
            for i in range(new_dml_start, new_dml_start + 2):
                pg, duck = statement(SEED, i)
                s.execute(pg)
                ref.apply(duck)
                hist.applied.append(duck)
            bad = mismatches(s, ref, hist.extra_mvs)
            assert not bad, f"new DML after recovery: {bad}"
        finally:
            ref.close()
        return outcome
    finally:
        db.close()


def _kill_loop(
    tmp_path: Path, runner: str, kills: list[float], extra_mv_run: int, min_acks: int = 0
) -> list[tuple[int, str]]:
    """Kill a child after each delay in turn; (acknowledged statements, in-flight outcome) per kill."""
    data_dir = tmp_path / "data"
    hist = History()
    _create_schema(data_dir, hist)
    outcomes = []
    for r, kill_after in enumerate(kills):
        extra = f"late_mv_{r}" if r == extra_mv_run else None
        run = _run_child(data_dir, (r + 1) * 1000, runner, kill_after, extra, min_acks)
        assert "ready" in run.events, run.stderr[-3000:]
        outcomes.append((len(run.acked), _check_after_kill(data_dir, hist, run, 200_000 + r * 10)))
    print(outcomes)
    return outcomes


def test_sigkill_recovery_local_runner(tmp_path: Path) -> None:
    rng = random.Random(5)
    kills = [rng.uniform(0.2, 2.0) for _ in range(4)]
    outcomes = _kill_loop(tmp_path, "local", kills, extra_mv_run=1)
    assert sum(n for n, _ in outcomes) >= 4, outcomes  # the kills hit a working database


@pytest.mark.spark
def test_sigkill_recovery_spark_runner(tmp_path: Path) -> None:
    """The child runs its epochs on its own Spark (killed with it: JVM and Python workers)."""
    outcomes = _kill_loop(tmp_path, "spark", [1.5], extra_mv_run=-1, min_acks=1)
    assert outcomes[0][0] >= 1, outcomes


def test_clean_restart_resumes_every_job_from_the_last_committed_epoch(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ref = Reference()
    db = Database(data_dir, config=_config())
    try:
        s = db.session()
        for ddl in schema_statements():
            s.execute(ddl)
        for i in range(4):
            pg, duck = statement(SEED, i)
            s.execute(pg)
            ref.apply(duck)
        for ddl in mv_statements():
            s.execute(ddl)
        for i in range(4, 20):
            pg, duck = statement(SEED, i)
            s.execute(pg)
            ref.apply(duck)
        before = {name: piestream_rows(s, name) for name in [*TABLES, *MVS]}
        fragments = set(db.barriers.graph.fragments)
    finally:
        db.close()
    committed = db.hummock.max_committed_epoch
    # the version as meta recovers it (read before a reopened database's barrier loop can commit)
    meta = MetaStore(data_dir / "meta.db")
    try:
        recovered = HummockManager(meta, SstableStore(InMemoryObjectStore("unused")))
        assert recovered.max_committed_epoch == committed
    finally:
        meta.close()

    db = Database(data_dir, config=_config())
    try:
        assert db.hummock.max_committed_epoch >= committed
        assert set(db.barriers.graph.fragments) == fragments  # every job runs again
        s = db.session()
        assert {name: piestream_rows(s, name) for name in before} == before
        first: list[int] = []
        db.barriers.on_commit.append(first.append)
        for i in range(20, 30):
            pg, duck = statement(SEED, i)
            s.execute(pg)
            ref.apply(duck)
        assert first and min(first) > committed
        bad = mismatches(s, ref)
        assert not bad, bad
    finally:
        db.close()
        ref.close()
