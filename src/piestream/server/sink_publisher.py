"""Publishing sink output after commits: the driver side of exactly-once sinks.

After each committed epoch the driver publishes the sink output that epoch's committed state
names (`piestream.connectors.sinks.publish_committed`), and does so again on startup for the last
committed epoch, so sinks are exactly once across crashes. A dropped sink's staged output is
deleted with it (`discard_staging`): nothing would ever publish it; so is what piestream made for
its delivery alone (a Kafka sink's marker topic).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from piestream.common.errors import PiestreamError
from piestream.connectors.lakehouse import (
    LAKE_CONNECTORS,
    LakeTable,
    drop_lake_target,
    open_lake_table,
    publish_lake,
)
from piestream.connectors.sinks import STAGING, publish_committed
from piestream.frontend.catalog import Relation
from piestream.plan.sink import SinkNode
from piestream.storage.table.storage_table import StorageTable

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)


class SinkPublisher:
    """Driver side of exactly-once sinks: after each committed epoch, publish what the committed
    sink state names (and, at startup, what the last committed epoch left staged)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: open targets kept across epochs (a Kafka sink's transactional producer), by relation id
        self._tables: dict[int, LakeTable] = {}

    def _sinks(self) -> list[Relation]:
        return [r for r in self.db.catalog.snapshot().relations() if r.sink is not None and r.sink.path]

    def publish(self, epoch: int | None = None) -> int:
        sinks = self._sinks()
        if not sinks:
            return 0
        storage, committed, vpin, spin = self.db.snapshot_storage()
        try:
            total = 0
            for rel in sinks:
                assert rel.sink is not None and rel.sink.path is not None
                rows = list(StorageTable(rel.sink.state_table, storage, committed).iter_rows())
                if rel.sink.connector in LAKE_CONNECTORS:
                    total += self._publish_lake(rel, committed, rows)
                else:
                    total += publish_committed(rel.sink.path, committed, rows)
            return total
        finally:
            self.db.release_snapshot(vpin, spin)

    def _publish_lake(self, rel: Relation, committed: int, rows: list[tuple]) -> int:
        assert rel.sink is not None and rel.sink.path is not None and rel.job_id is not None
        node = next(
            n
            for f in self.db.catalog.job_fragments(rel.job_id)
            for n in f.root.walk()
            if isinstance(n, SinkNode)
        )
        keyed = node.sink_type == "upsert" or (
            rel.sink.connector == "kafka" and node.sink_type == "changelog"
        )
        key = [node.names[node.columns.index(k)] for k in node.key] if keyed else []
        keep = rel.sink.connector == "kafka"
        table = self._tables.get(rel.id) if keep else None
        if table is None:
            table = open_lake_table(rel.sink.connector, rel.properties, rel.name, node.sink_type, key)
            if keep:
                self._tables[rel.id] = table
        try:
            return publish_lake(table, os.path.join(rel.sink.path, STAGING), committed, rows)
        except BaseException:
            self._tables.pop(rel.id, None)  # opened afresh (fenced, markers re-read) next time
            raise

    def on_commit(self, epoch: int) -> None:
        try:
            self.publish(epoch)
        except Exception:  # the epoch is committed; publishing is retried after the next one
            log.exception("publishing sink output of epoch %d failed", epoch)


def attach(db: Database) -> None:
    """Hook sink publishing into the barrier manager and finish what a crash interrupted."""
    publisher = SinkPublisher(db)
    publisher.on_commit(db.hummock.max_committed_epoch)
    db.barriers.on_commit.append(publisher.on_commit)


def discard_staging(data_dir: Path, dropped: Iterable[Relation]) -> None:
    """After DROP: delete the staged (unpublished) output of the dropped sinks; a staging
    directory piestream made for a lake sink goes whole. Published output stays."""
    root = os.path.abspath(data_dir / "sink_staging")
    for rel in dropped:
        if rel.sink is None:
            continue
        try:
            drop_lake_target(rel.sink.connector, rel.properties)
        except PiestreamError as e:  # the sink is dropped all the same; say what was left
            log.warning("DROP SINK %s: %s", rel.name, e)
        if not rel.sink.path:
            continue
        shutil.rmtree(os.path.join(rel.sink.path, STAGING), ignore_errors=True)
        if rel.sink.connector in LAKE_CONNECTORS and os.path.dirname(os.path.abspath(rel.sink.path)) == root:
            shutil.rmtree(rel.sink.path, ignore_errors=True)
