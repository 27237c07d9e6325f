"""Acknowledging source offsets after commits: the driver side of a reader's optional ``ack``.

After each committed epoch, every running source whose reader defines ``ack(split, offset)``
(`piestream.stream.connector.ACK`) is told the offsets its committed state holds (RisingWave's
WaitCheckpointWorker): only durable offsets, never one a retried epoch might re-read. Kafka
commits them to its consumer group (monitoring only: piestream resumes from its own state); a
CDC reader confirms its replication position. An ack that fails is logged and retried after the
next commit; it never fails the epoch, which is already durable.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from piestream.plan.source import SourceNode
from piestream.storage.table.storage_table import StorageTable
from piestream.stream.connector import ACK, source_connector

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)


def source_nodes(db: Database) -> list[tuple[int, SourceNode]]:
    """(job id, node) of every source node of the running jobs."""
    out = []
    for f in db.catalog.all_fragments():
        out += [(f.job_id, n) for n in f.root.walk() if isinstance(n, SourceNode)]
    return out


def committed_offsets(db: Database, nodes: list[SourceNode]) -> list[list[tuple[str, str | None]]]:
    """Per node, (split, reader offset) of its committed state, from one storage snapshot."""
    storage, committed, vpin, spin = db.snapshot_storage()
    try:
        return [
            [
                (s, json.loads(v).get("o"))
                for s, v in StorageTable(n.state_table, storage, committed).iter_rows()
            ]
            for n in nodes
        ]
    finally:
        db.release_snapshot(vpin, spin)


class SourceAcker:
    def __init__(self, db: Database) -> None:
        self.db = db
        # (job id, state table id) -> the reader's ack (None: it has none), and offsets acked
        self._acks: dict[tuple[int, int], Any] = {}
        self._acked: dict[tuple[int, int], dict[str, str]] = {}
        # the SSTs holding the source's state table when its offsets were last all acked: its
        # committed rows are a function of them, so while they stay, there is nothing to ack
        self._scanned: dict[tuple[int, int], frozenset[int]] = {}

    def _sources(self) -> list[tuple[tuple[int, int], SourceNode, Any]]:
        out = []
        live = set()
        for job, n in source_nodes(self.db):
            key = (job, n.state_table.table_id)
            live.add(key)
            if key not in self._acks:
                try:
                    reader, _ = source_connector(n.spec.connector)(n.spec)
                except Exception:  # the job itself reports a source it cannot build
                    log.debug("no reader for the acks of %s", n.source_name, exc_info=True)
                    reader = None
                self._acks[key] = getattr(reader, ACK, None)
            if self._acks[key] is not None:
                out.append((key, n, self._acks[key]))
        for gone in set(self._acks) - live:  # dropped jobs
            self._acks.pop(gone, None)
            self._acked.pop(gone, None)
            self._scanned.pop(gone, None)
        return out

    def ack(self) -> int:
        """Ack the committed offsets that changed since the last ack; returns how many."""
        sources = self._sources()
        if not sources:
            return 0
        storage, committed, vpin, spin = self.db.snapshot_storage()
        try:
            holding: dict[int, set[int]] = {}  # table id -> the SSTs with its rows (per SST)
            for sst in storage.version.all_ssts():
                for t in sst.table_ids:
                    holding.setdefault(t, set()).add(sst.object_id)
            n = 0
            for key, node, ack in sources:
                ssts = frozenset(holding.get(node.state_table.table_id, ()))
                if self._scanned.get(key) == ssts:
                    continue  # the committed offsets are the ones acked last (issue 27's barrier cost)
                self._scanned.pop(key, None)  # until every split's ack below went through
                done = self._acked.setdefault(key, {})
                for split, info in StorageTable(node.state_table, storage, committed).iter_rows():
                    if done.get(split) == info:
                        continue
                    offset = json.loads(info).get("o")
                    if offset is not None:
                        ack(split, offset)
                        n += 1
                    done[split] = info
                self._scanned[key] = ssts
            return n
        finally:
            self.db.release_snapshot(vpin, spin)

    def on_commit(self, epoch: int) -> None:
        try:
            self.ack()
        except Exception:  # the epoch is committed; acks are retried after the next one
            log.exception("acknowledging source offsets of epoch %d failed", epoch)


def attach(db: Database) -> SourceAcker:
    """Hook source acks into the barrier manager (and ack what is committed now)."""
    acker = SourceAcker(db)
    acker.on_commit(db.hummock.max_committed_epoch)
    db.barriers.on_commit.append(acker.on_commit)
    return acker
