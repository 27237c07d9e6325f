"""Temporary relations outlive neither their session nor a restart of the database."""

from __future__ import annotations

from pathlib import Path

from piestream.server.database import Database, DatabaseConfig


def test_temporary_relations_are_gone_after_a_crash(tmp_path: Path) -> None:
    config = DatabaseConfig(runner="local", barrier_interval=0.05)
    db = Database(tmp_path / "db", config=config)
    s = db.session()
    s.execute("CREATE TABLE keep (a INT)")
    s.execute("CREATE TEMP TABLE t (a INT)")
    s.execute("INSERT INTO t VALUES (1)")
    s.execute("CREATE INDEX ti ON t (a)")  # in the table's (temporary) schema
    s.execute("CREATE VIEW tv AS SELECT a FROM t")
    assert {r.name for r in db.catalog.snapshot().relations_in(s.temp_schema)} == {"t", "ti", "tv"}
    db.close()  # the session never ended: as if the server died
    db = Database(tmp_path / "db", config=config)
    try:
        left = {(r.schema_name, r.name) for r in db.catalog.snapshot().relations()}
        assert left == {("public", "keep")}
    finally:
        db.close()
