"""A data directory written by the previous catalog format opens, is upgraded, and keeps running.

`tests/fixtures/datadir_v0` was written by main before plans became versioned data: its jobs'
fragments are stored in Python's object format, naming executor modules that no longer exist,
and its catalog entries keep kind-specific fields in an untyped ``extra`` dict (see
`tests/fixtures/make_datadir_v0.py`). Opening it must upgrade it in place (nothing of the old
format left), answer every query as before, and keep every job running: new rows reach every MV,
sources resume from their committed offsets (no row read twice).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from piestream.common.text import format_datum
from piestream.frontend.catalog import CatalogFormatError, RelationKind
from piestream.frontend.parser import ast, parse_one
from piestream.meta.catalog_store import CATALOG_FORMAT
from piestream.meta.store import MetaStore
from piestream.plan.serde import PLAN_FORMAT
from piestream.server.database import Database, DatabaseConfig
from piestream.server.session import Session

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "datadir_v0"
QUERIES = {
    "t": "SELECT * FROM t ORDER BY k",
    "events": "SELECT id, amount, ts, tags FROM events ORDER BY id, ts",
    "ao": "SELECT a, b FROM ao ORDER BY a, b",
    "up": "SELECT * FROM up ORDER BY k",
    "gen_sum": "SELECT * FROM gen_sum",
    "gent_by_r": "SELECT * FROM gent_by_r ORDER BY r",
    "mv_join": "SELECT * FROM mv_join ORDER BY k",
    "mv_left": "SELECT * FROM mv_left ORDER BY k, amount",
    "top2": "SELECT * FROM top2 ORDER BY x DESC",
    "proj": "SELECT * FROM proj ORDER BY k",
    "dedup": "SELECT * FROM dedup ORDER BY a",
    "hop": "SELECT * FROM hop ORDER BY window_start",
    "ranked": "SELECT * FROM ranked ORDER BY k",
    "ranks": "SELECT * FROM ranks ORDER BY k",
    "uni": "SELECT * FROM uni ORDER BY id",
    "dyn": "SELECT * FROM dyn ORDER BY k",
    "consts": "SELECT * FROM consts ORDER BY i",
    "mv_on_mv": "SELECT * FROM mv_on_mv",
    "semi": "SELECT * FROM semi ORDER BY k",
    "t_by_v": "SELECT v, k FROM t_by_v ORDER BY v, k",
    "v_big": "SELECT * FROM v_big ORDER BY k",
}


def _config() -> DatabaseConfig:
    return DatabaseConfig(runner="local", barrier_interval=3600, background_compaction=False)


def _answers(s: Session) -> dict[str, list[list[str | None]]]:
    out = {}
    for name, sql in QUERIES.items():
        r = s.execute_one(sql)
        types = [t for _, t in r.columns]
        out[name] = [[None if v is None else format_datum(v, t) for v, t in zip(row, types, strict=True)]
                     for row in r.rows]  # fmt: skip
    return out


def _every_mv_equals_its_query(db: Database, s: Session) -> None:
    """Every MV not over a source (a source cannot be queried) equals its query, in batch."""
    snapshot = db.catalog.snapshot()
    sources = {r.id for r in snapshot.relations() if r.kind is RelationKind.SOURCE}
    for rel in snapshot.relations():
        if rel.kind is not RelationKind.MATERIALIZED_VIEW or sources & set(rel.depends_on):
            continue
        stmt = parse_one(rel.definition)
        assert isinstance(stmt, ast.CreateMaterializedView)
        want = sorted(map(repr, s.execute_one(stmt.sql_text).rows))
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
        assert _answers(s) == expected  # the committed state, read through the upgraded catalog
        jobs = db.meta.scan("catalog.job")
        assert len(jobs) == 22
        for _, raw in jobs:  # every job is now a versioned plan document
            assert json.loads(raw)["format"] == PLAN_FORMAT
        for _, raw in db.meta.scan("catalog.relation"):
            assert json.loads(raw)["format"] == 1
        assert db.meta.get("catalog.format", "version") == str(CATALOG_FORMAT)
        assert set(db.barriers.graph.fragments) == {f.fragment_id for f in db.catalog.all_fragments()}

        # every job runs on: new rows reach the MVs, sources resume from their offsets
        s.execute(
            "INSERT INTO t VALUES (6, 'f', 9.5, DATE '2024-06-06', 2.5);"
            "INSERT INTO events VALUES (6, 7.25, TIMESTAMP '2024-01-01 13:05:00', ARRAY['n']);"
            "INSERT INTO ao VALUES (9, 9); DELETE FROM t WHERE k = 1; FLUSH;"
        )
        db.barriers.flush()
        after = _answers(s)
        assert after["gen_sum"] == expected["gen_sum"]  # the bounded sources read no row twice
        assert after["gent_by_r"] == expected["gent_by_r"]
        assert after["mv_join"][-1] == ["6", "f", "1", "7.25", "n"]
        assert after["top2"] == [["6", "9.5"], ["4", "5.5"]]
        assert ["9"] in after["dedup"]
        _every_mv_equals_its_query(db, s)
    finally:
        db.close()

    db = Database(old_dir, config=_config())  # and it opens again, now as the current format
    try:
        s = db.session()
        assert _answers(s) == after
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
