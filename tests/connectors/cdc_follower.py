"""A CDC reader's output applied to a dict by key, as a CDC table's upsert semantics apply it (the
reader tests of postgres-cdc and mysql-cdc)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from piestream.common.chunk import Op
from piestream.common.epoch import EpochPair
from piestream.connectors.cdc.offset import CdcOffset

EPOCH = EpochPair(2, 1)


class Follower:
    """Applies a reader's output to a dict by key, as the table's upsert semantics do (an
    upstream TRUNCATE empties it)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.offset: str | None = None
        self.rows: dict[object, tuple[object, ...]] = {}
        self.split = reader.splits()[0]

    def step(self, budget: int = 1000, *, ack: bool = True) -> int:
        res = self.reader.read(self.split, self.offset, budget, EPOCH)
        assert res.consumed <= budget
        for k, (b, ops) in enumerate(zip(res.batches, res.ops or [], strict=True)):
            if k in res.truncate_at:
                self.rows.clear()
            for row, op in zip(pa.Table.from_batches([b]).to_pylist(), ops.tolist(), strict=True):
                vals = tuple(row.values())
                if op == Op.INSERT:
                    self.rows[vals[0]] = vals
                else:
                    assert op == Op.DELETE
                    self.rows.pop(vals[0], None)
        if len(res.batches) in res.truncate_at:
            self.rows.clear()
        self.offset = res.offset
        if ack and hasattr(self.reader, "ack") and CdcOffset.from_json(res.offset).phase == "stream":
            self.reader.ack(self.split, res.offset)
        return res.consumed

    def drain(self, budget: int = 1000) -> None:
        while self.step(budget):
            pass
