"""A data directory remembers its object store: opening it with another one is refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from piestream.cli import main
from piestream.server.database import Database, DatabaseConfig, ObjectStoreMismatch


def test_a_data_directory_is_opened_only_with_its_own_object_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, other = tmp_path / "data", tmp_path / "elsewhere"
    db = Database(data, config=DatabaseConfig(runner="local"))
    db.execute("CREATE TABLE t (k INT PRIMARY KEY)")
    db.execute("INSERT INTO t VALUES (1)")
    db.close()
    with pytest.raises(
        ObjectStoreMismatch, match="keeps its tables in the data directory's objects/"
    ) as info:
        Database(data, config=DatabaseConfig(runner="local", object_store_url=str(other)))
    assert info.value.sqlstate == "55000" and info.value.hint == "start it without --object-store"
    # the refused open released the directory: it opens again as it was
    db = Database(data, config=DatabaseConfig(runner="local"))
    assert db.execute("SELECT k FROM t")[0].rows == [(1,)]
    db.close()
    # the CLI says so in one line
    args = ["sql", "--embedded", "--runner", "local", "--data-dir", str(data), "--object-store", str(other)]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "SELECT 1"])
    text = str(exit_info.value)
    assert text.startswith(f"piestream: cannot open {data}") and "Traceback" not in text
    # and a directory created with an explicit store needs it again
    db = Database(tmp_path / "d2", config=DatabaseConfig(runner="local", object_store_url=str(other)))
    db.close()
    with pytest.raises(ObjectStoreMismatch) as info:
        Database(tmp_path / "d2", config=DatabaseConfig(runner="local"))
    assert info.value.hint == f"start it with --object-store {other}"
