"""A data directory written by the previous catalog format opens, is upgraded, and keeps running.

`tests/fixtures/datadir_v0` was written by main before plans became versioned data: its jobs'
fragments are stored in Python's object format, naming executor modules that no longer exist,
and its catalog entries keep kind-specific fields in an untyped ``extra`` dict (see
`tests/fixtures/make_datadir_v0.py`). Opening it must upgrade it in place (nothing of the old
format left), answer every query as before, and keep every job running: new rows reach every MV,
sources resume from their committed offsets (no row read twice).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from types import ModuleType

import pytest

from piestream.frontend.catalog import RELATION_FORMAT, CatalogFormatError, RelationKind
from piestream.frontend.parser import ast, parse_one
from piestream.meta.catalog_store import CATALOG_FORMAT
from piestream.meta.store import MetaStore
from piestream.plan.serde import PLAN_FORMAT
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session
from piestream.stream.executors.agg.states import LEGACY_SPECIAL

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "datadir_v0"


def _fixture_module() -> ModuleType:
    """tests/fixtures/make_datadir_v0.py: the queries whose answers the fixture recorded."""
    spec = importlib.util.spec_from_file_location("make_datadir_v0", FIXTURE.parent / "make_datadir_v0.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _fixture_module()


def _config() -> DatabaseConfig:
    return DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)


def _decimal_rules(v: object) -> object:
    """A NUMERIC as a view planned before per-value scales computes it: 10 fraction digits
    (half away from zero), no trailing zeros (README, "Upgrading")."""
    if not isinstance(v, Decimal) or not v.is_finite():
        return v
    with localcontext(prec=60):
        n = v.quantize(Decimal("1e-10"), ROUND_HALF_UP).normalize()
        return n.quantize(Decimal(1)) if n.as_tuple().exponent > 0 else n  # type: ignore[operator]


def _every_mv_equals_its_query(db: Database, s: Session) -> None:
    """Every MV not over a source (a source cannot be queried) equals its query, in batch. Each
    view of the fixture was planned before per-value-scale NUMERIC and keeps the old NUMERIC
    rules (plan/numeric_rules.py), while a batch query follows PostgreSQL's: the two agree once
    the query's NUMERICs are taken at the old rules."""
    snapshot = db.catalog.snapshot()
    sources = {r.id for r in snapshot.relations() if r.kind is RelationKind.SOURCE}
    for rel in snapshot.relations():
        if rel.kind is not RelationKind.MATERIALIZED_VIEW or sources & set(rel.depends_on):
            continue
        stmt = parse_one(rel.definition)
        assert isinstance(stmt, ast.CreateMaterializedView)
        old_rules = [tuple(map(_decimal_rules, r)) for r in s.execute_one(stmt.sql_text).rows]
        want = sorted(map(repr, old_rules))
        got = sorted(map(repr, s.execute_one(f"SELECT * FROM {rel.name}").rows))
        assert got == want, rel.name


@pytest.fixture
def old_dir(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(FIXTURE, target)
    return target


def test_a_format_0_data_directory_is_upgraded_and_keeps_running(old_dir: Path) -> None:
    expected = json.loads((old_dir / "expected.json").read_text())
    db = Database(old_dir, config=_config())
    try:
        s = db.session()
        assert MAKER.answers(db) == expected  # the committed state, read through the upgraded catalog
        jobs = db.meta.scan("catalog.job")
        assert len(jobs) == 22
        for _, raw in jobs:  # every job is now a versioned plan document
            assert json.loads(raw)["format"] == PLAN_FORMAT
        for _, raw in db.meta.scan("catalog.relation"):
            assert json.loads(raw)["format"] == RELATION_FORMAT
        assert db.meta.get("catalog.format", "version") == str(CATALOG_FORMAT)
        assert set(db.barriers.graph.fragments) == {f.fragment_id for f in db.catalog.all_fragments()}

        # every job runs on: new rows reach the MVs, sources resume from their offsets
        s.execute(
            "INSERT INTO t VALUES (6, 'f', 9.5, DATE '2024-06-06', 2.5);"
            "INSERT INTO events VALUES (6, 7.25, TIMESTAMP '2024-01-01 13:05:00', ARRAY['n']);"
            "INSERT INTO ao VALUES (9, 9); DELETE FROM t WHERE k = 1; FLUSH;"
        )
        db.barriers.flush()
        after = MAKER.answers(db)
        assert after["gen_sum"] == expected["gen_sum"]  # the bounded sources read no row twice
        assert after["gent_by_r"] == expected["gent_by_r"]
        assert after["mv_join"][-1] == ["6", "f", "1", "7.25", "n"]
        assert after["top2"] == [["6", "9.5"], ["4", "5.5"]]
        # proj's `n / 3` keeps the rule its view was planned with for new rows too (10 digits,
        # as its old rows), while the same expression in a query follows PostgreSQL's
        assert [r[4] for r in after["proj"] if r[0] == "6"] == ["0.8333333333"]
        assert s.execute_one("SELECT n / 3 FROM t WHERE k = 6").rows == [(Decimal("0.83333333333333333333"),)]
        assert str(s.execute_one("SELECT n / 3 FROM t WHERE k = 6").rows[0][0]) == "0.83333333333333333333"
        assert ["9"] in after["dedup"]
        _every_mv_equals_its_query(db, s)
    finally:
        db.close()

    db = Database(old_dir, config=_config())  # and it opens again, now as the current format
    try:
        s = db.session()
        assert MAKER.answers(db) == after
        _every_mv_equals_its_query(db, s)
    finally:
        db.close()


def test_a_catalog_of_a_newer_format_is_refused_clearly(old_dir: Path) -> None:
    meta = MetaStore(old_dir / "meta.db")
    meta.put("catalog.format", "version", str(CATALOG_FORMAT + 1))
    meta.close()
    with pytest.raises(
        CatalogFormatError, match="has format 2; this piestream reads catalog formats up to 1"
    ):
        Database(old_dir, config=_config())


def test_a_nan_reaching_an_old_views_numeric_sum_is_null_and_an_error_record(old_dir: Path) -> None:
    """mv_join's sum(amount) keeps the state layout it was created with, which has no NaN: a NaN
    amount counts as NULL there and is recorded in rw_streaming_errors (the epoch commits), while
    a view created after the upgrade sums it as PostgreSQL does."""
    db = Database(old_dir, config=_config())
    try:
        s = db.session()
        assert s.execute_one("SELECT c, total FROM mv_join WHERE k = 2").rows == [(1, Decimal(4))]
        s.execute("INSERT INTO events VALUES (2, 'NaN', TIMESTAMP '2024-01-02 00:00:00', ARRAY['q']); FLUSH;")
        db.barriers.flush()
        assert s.execute_one("SELECT c, total FROM mv_join WHERE k = 2").rows == [(2, Decimal(4))]
        errors = s.execute_one(
            "SELECT sqlstate, error_message, error_count FROM rw_catalog.rw_streaming_errors "
            "WHERE job_name = 'mv_join'"
        ).rows
        assert errors == [("22003", LEGACY_SPECIAL, 1)]
        s.execute(
            "CREATE MATERIALIZED VIEW mv_new AS SELECT t.k, sum(e.amount) AS total "
            "FROM t JOIN events e ON t.k = e.id GROUP BY t.k"
        )
        assert s.execute_one("SELECT total::text FROM mv_new WHERE k = 2").rows == [("NaN",)]
    finally:
        db.close()
