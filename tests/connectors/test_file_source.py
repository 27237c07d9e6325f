"""The file source: new files picked up in name order, appended lines, JSON / CSV / Parquet,
malformed records rejected (naming file and line) or dead-lettered, never dropped silently."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from nexmark_sql import wait_until

from piestream.common.epoch import EpochPair
from piestream.common.errors import PiestreamError
from piestream.common.types import BIGINT, INT, TIMESTAMP, VARCHAR
from piestream.connectors.files import FileReader, file_connector
from piestream.connectors.options import InvalidOption
from piestream.plan.source import SourceSpec
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.connector import ReadResult

EP = EpochPair(2 << 16, 1 << 16)


class Epochs:
    """Drive one split of a reader epoch by epoch, keeping its committed offset."""

    def __init__(self, reader: FileReader, budget: int = 1000) -> None:
        self.reader = reader
        self.offset: str | None = None
        self.budget = budget

    def step(self) -> ReadResult:
        r = self.reader.read("0", self.offset, self.budget, EP)
        self.offset = r.offset
        return r

    def rows(self) -> list[tuple]:
        r = self.step()
        return [tuple(row.values()) for b in r.batches for row in b.to_pylist()]


def test_json_files_appear_grow_and_are_read_in_name_order(tmp_path: Path) -> None:
    reader = FileReader(str(tmp_path), (("k", INT), ("t", VARCHAR)), "json")
    e = Epochs(reader)
    (tmp_path / "b.json").write_text('{"k": 2, "t": "b"}\n')
    (tmp_path / "a.json").write_text('{"k": 1, "T": "a"}\n{"k": 3}\n')
    (tmp_path / ".hidden.json").write_text("garbage\n")
    assert e.rows() == []  # an epoch reads what committed state knows; this one lists the files
    assert e.rows() == [(1, "a"), (3, None), (2, "b")]
    with open(tmp_path / "a.json", "a") as f:
        f.write('{"k": 4, "t": "x"}\n{"k": 5, "t": "partial"}')  # the last line is still being written
    assert e.rows() == []
    assert e.rows() == [(4, "x")]
    assert e.rows() == [(5, "partial")]  # its size did not change for an epoch: the line is complete
    assert e.rows() == []
    state = json.loads(e.offset or "{}")["f"]
    assert state["a.json"][1] == 4 and state["b.json"][1] == 1  # lines consumed per file


def test_a_retried_epoch_reads_the_same_whatever_appeared_since(tmp_path: Path) -> None:
    reader = FileReader(str(tmp_path), (("k", INT),), "json")
    (tmp_path / "a.json").write_text('{"k": 1}\n')
    listed = reader.read("0", None, 10, EP).offset
    first = reader.read("0", listed, 10, EP)
    (tmp_path / "z.json").write_text('{"k": 2}\n')
    with open(tmp_path / "a.json", "a") as f:
        f.write('{"k": 3}\n')
    retry = reader.read("0", listed, 10, EP)
    assert [b.to_pylist() for b in retry.batches] == [b.to_pylist() for b in first.batches] == [[{"k": 1}]]


def test_budget_limits_lines_per_epoch(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("".join(f'{{"k": {i}}}\n' for i in range(10)))
    e = Epochs(FileReader(str(tmp_path), (("k", BIGINT),), "json"), budget=4)
    e.step()
    assert [e.rows() for _ in range(4)] == [
        [(0,), (1,), (2,), (3,)],
        [(4,), (5,), (6,), (7,)],
        [(8,), (9,)],
        [],
    ]


def test_malformed_records_name_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"k": 1}\n\nnot json\n{"k": "x1"}\n[1]\n{"k": 99999999999}\n{"k": 7}\n')
    e = Epochs(FileReader(str(tmp_path), (("k", INT),), "json"))
    e.step()
    r = e.step()
    assert [b.to_pylist() for b in r.batches] == [[{"k": 1}, {"k": 7}]]
    assert [(b.file, b.line, b.raw) for b in r.bad_records] == [
        ("a.json", 3, "not json"),
        ("a.json", 4, '{"k": "x1"}'),
        ("a.json", 5, "[1]"),
        ("a.json", 6, '{"k": 99999999999}'),
    ]
    assert "integer" in r.bad_records[1].error and "out of range" in r.bad_records[3].error


def test_csv_with_and_without_header(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text('name,id,ts\nann,1,2024-01-01 10:00:00\n"b,ob",2,\nzed,three,\nx,1\n')
    cols = (("id", BIGINT), ("name", VARCHAR), ("ts", TIMESTAMP))
    e = Epochs(FileReader(str(tmp_path), cols, "csv"))
    e.step()
    r = e.step()
    rows = [tuple(x.values()) for b in r.batches for x in b.to_pylist()]
    assert [(i, n) for i, n, _ in rows] == [(1, "ann"), (2, "b,ob")] and rows[1][2] is None
    assert [(b.line, b.error.split(":")[0]) for b in r.bad_records] == [
        (4, 'column "id"'),
        (5, "expected 3 fields, got 2"),
    ]
    (tmp_path / "b.txt").write_text("5;five\n")
    e2 = Epochs(
        FileReader(
            str(tmp_path),
            (("id", INT), ("name", VARCHAR)),
            "csv",
            pattern="*.txt",
            csv_header=False,
            csv_delimiter=";",
        )
    )
    e2.step()
    assert e2.rows() == [(5, "five")]


def test_parquet_files_by_rows(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"K": [1, 2, 3], "v": ["a", "b", "c"], "other": [0.5, 1.5, 2.5]}),
        tmp_path / "p1.parquet",
        row_group_size=2,
    )
    (tmp_path / "p2.parquet").write_bytes(b"PAR1 not really")
    e = Epochs(FileReader(str(tmp_path), (("k", BIGINT), ("v", VARCHAR)), "parquet"), budget=2)
    results = [e.step() for _ in range(5)]
    rows = [[tuple(x.values()) for b in r.batches for x in b.to_pylist()] for r in results]
    assert rows == [[], [(1, "a"), (2, "b")], [(3, "c")], [], []]
    # the unreadable file, seen twice at the same size, is reported once
    assert [[(b.file, b.line) for b in r.bad_records] for r in results] == [
        [],
        [],
        [("p2.parquet", 0)],
        [],
        [],
    ]


def test_options_are_validated(tmp_path: Path) -> None:
    spec = SourceSpec("s", "file", (("k", INT),), {"path": str(tmp_path / "nope")}, "json")
    with pytest.raises(InvalidOption, match="not a directory"):
        file_connector(spec)
    spec = SourceSpec("s", "file", (("k", INT),), {"path": str(tmp_path)}, None)
    with pytest.raises(InvalidOption, match="ENCODE"):
        file_connector(spec)
    spec = SourceSpec("s", "file", (("k", INT),), {"path": str(tmp_path), "error.handling": "ignore"}, "json")
    with pytest.raises(InvalidOption, match=r"error\.handling"):
        file_connector(spec)


def _db(path: Path) -> Database:
    return Database(
        path, config=DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
    )


def test_sql_reject_fails_the_epoch_until_the_record_is_fixed(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.json").write_text('{"k": 1}\n{"k": "bad"}\n{"k": 3}\n')
    db = _db(tmp_path / "db")
    try:
        db.execute(f"CREATE TABLE t (k INT) WITH (connector = 'file', path = '{d}') FORMAT PLAIN ENCODE JSON")
        with pytest.raises(PiestreamError, match=r'malformed record in file "a\.json", line 2'):
            for _ in range(3):
                db.execute("FLUSH")
        assert db.execute("SELECT count(*) FROM t")[0].rows == [(0,)]  # the whole epoch failed
        (d / "a.json").write_text('{"k": 1}\n{"k": 22222}\n{"k": 3}\n')  # fixed in place
        wait_until(lambda: db.execute("SELECT count(*) FROM t")[0].rows == [(3,)], what="the fixed file")
        assert sorted(db.execute("SELECT k FROM t")[0].rows) == [(1,), (3,), (22222,)]
        with pytest.raises(PiestreamError, match="cannot write to table"):
            db.execute("INSERT INTO t VALUES (5)")
    finally:
        db.close()


def test_sql_dead_letter_table_and_source_mv(tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    db = _db(tmp_path / "db")
    try:
        db.execute(
            f"CREATE SOURCE s (k INT, t VARCHAR) WITH (connector = 'file', path = '{d}', "
            "error.handling = 'dead_letter') FORMAT PLAIN ENCODE JSON"
        )
        with pytest.raises(PiestreamError, match="cannot query a source directly") as err:
            db.execute("SELECT * FROM s")
        assert err.value.sqlstate == "0A000"
        db.execute("CREATE MATERIALIZED VIEW m AS SELECT t, sum(k) AS total FROM s GROUP BY t")
        (d / "1.json").write_text('{"k": 1, "t": "a"}\n{"k": oops}\n')
        (d / "2.json").write_text('{"k": 2, "t": "a"}\n{"k": 5, "t": "b"}\n')
        wait_until(lambda: len(db.execute("SELECT * FROM m")[0].rows) == 2, what="the MV")
        wait_until(
            lambda: db.execute("SELECT total FROM m WHERE t = 'a'")[0].rows == [(3,)], what="both files"
        )
        assert db.execute("SELECT file, line, raw FROM s_dead_letter")[0].rows == [
            ("1.json", 2, '{"k": oops}')
        ]
        assert ("s",) in db.execute("SHOW SOURCES")[0].rows
        with pytest.raises(PiestreamError, match="belongs to another object"):
            db.execute("DROP TABLE s_dead_letter")
        db.execute("DROP SOURCE s CASCADE")
        assert db.catalog.get("s_dead_letter") is None and db.catalog.get("m") is None
    finally:
        db.close()
