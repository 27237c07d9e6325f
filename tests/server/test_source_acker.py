"""`SourceAcker`: after each commit a reader with ``ack`` hears the committed offsets that
changed, and the source's state table is scanned only when the committed SSTs holding it did
(an epoch that changed no offset costs no scan); an ack that failed is retried after the next
commit even so."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from piestream.common.epoch import EpochPair
from piestream.connectors.datagen import datagen_connector
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.server import source_acker
from piestream.server.database import Database, DatabaseConfig
from piestream.stream.connector import ReadResult, register_source_connector


@dataclass
class _Acking:
    """A datagen reader that records its acks (and fails them while `failing`)."""

    inner: Any
    acks: list[tuple[str, str]] = field(default_factory=list)
    failing: bool = False

    def splits(self) -> list[str]:
        return list(self.inner.splits())

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        return self.inner.read(split, offset, budget, epoch)

    def ack(self, split: str, offset: str) -> None:
        if self.failing:
            raise ConnectionError("the upstream is away")
        self.acks.append((split, offset))


def _acking(spec: SourceSpec) -> tuple[_Acking, SourceLimits]:
    reader, limits = datagen_connector(spec)
    return _Acking(reader, failing=_Acking.failing), limits


register_source_connector("acking_datagen", _acking)


def test_acks_follow_committed_offsets_and_unchanged_state_is_not_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[int] = []
    table = source_acker.StorageTable

    class Counted(table):  # type: ignore[misc, valid-type]
        def iter_rows(self, *a: Any, **k: Any) -> Any:
            scans.append(self.desc.table_id)
            return super().iter_rows(*a, **k)

    monkeypatch.setattr(source_acker, "StorageTable", Counted)
    monkeypatch.setattr(_Acking, "failing", True)  # every reader's acks fail, until told
    cfg = DatabaseConfig(runner="local", barrier_interval=3600, parallelism=2, background_compaction=False)
    with Database(tmp_path / "d", config=cfg) as db:
        s = db.session()
        s.execute(
            "CREATE TABLE src (id BIGINT) WITH (connector = 'acking_datagen', fields.id.kind = 'sequence', "
            "fields.id.start = '1', fields.id.end = '40', datagen.rows.per.second = '0', "
            "datagen.split.num = '2', max.rows.per.epoch = '10')"  # 5 rows per split and epoch
        )
        for _ in range(30):
            s.execute("FLUSH")
            if s.execute_one("SELECT count(*) FROM src").rows == [(40,)]:
                break
        assert sorted(s.execute_one("SELECT id FROM src").rows) == [(i,) for i in range(1, 41)]
        for _ in range(2):  # the epochs that find the sequence's end: the offsets stay
            s.execute("FLUSH")
        (node,) = [n for _, n in source_acker.source_nodes(db)]
        committed = dict(source_acker.committed_offsets(db, [node])[0])
        acker = _acker(db)
        (ack,) = [a for (_, t), a in acker._acks.items() if t == node.state_table.table_id]
        reader: _Acking = ack.__self__
        assert reader.acks == [] and len(committed) == 2
        # the acks failed so far: retried after the next commit, though it changed no offset
        reader.failing = False
        s.execute("FLUSH")
        assert dict(reader.acks) == committed and len(reader.acks) == 2
        before = len(scans)
        for _ in range(3):  # nothing changes the offsets now: no ack, and no scan either
            s.execute("FLUSH")
        assert len(reader.acks) == 2 and len(scans) == before


def _acker(db: Database) -> source_acker.SourceAcker:
    """The database's acker (its commit hook)."""
    (hook,) = [
        h for h in db.barriers.on_commit if isinstance(getattr(h, "__self__", None), source_acker.SourceAcker)
    ]
    return hook.__self__  # type: ignore[no-any-return, attr-defined]
