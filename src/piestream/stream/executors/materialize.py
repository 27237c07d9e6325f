"""Materialize: write a change stream into a table or MV and forward it (reference §6.4).

Conflict handling by pk:

- NoCheck: the input is a consistent change stream (MVs); write and forward it as is.
- Overwrite: an upsert stream (a table with a pk, seed 003 "upsert stream"): an insert of an
  existing key becomes U-(stored row) U+(new row), a delete carries the *stored* row, a delete of a
  missing key is dropped. The result is a consistent change stream.
- IgnoreConflict: an insert of an existing key is dropped (ON CONFLICT DO NOTHING).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import Op, StreamChunk
from piestream.encoding import memcomparable
from piestream.encoding.ragged import Ragged
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.stream.executor import ActorContext, Executor


class MaterializeExecutor(Executor):
    def __init__(self, ctx: ActorContext, node: MaterializeNode) -> None:
        super().__init__(ctx, node.schema, node.stream_key, node.append_only)
        self.desc = node.table
        self.conflict = node.conflict
        self.state = self.table(node.table)

    def process(self, chunk: StreamChunk, input_idx: int = 0) -> list[StreamChunk]:
        c = chunk.compact()
        if not c.capacity:
            return []
        if self.conflict is not ConflictBehavior.NO_CHECK:
            c = self._resolve_conflicts(c)
            if not c.capacity:
                return []
        self.state.write_chunk(c)
        return [c]

    @staticmethod
    def _inserts_of_distinct_keys(
        c: StreamChunk, key_r: Ragged, found: np.ndarray, stored: list[pa.Array], overwrite: bool
    ) -> StreamChunk | None:
        """The common bulk case, vectorized: only inserts, each key once in the chunk. A key not
        stored is inserted; a stored one is overwritten (U-, U+) or the insert dropped."""
        if not (c.ops == Op.INSERT).all():
            return None
        keys = key_r.to_arrow()
        if pc.count_distinct(keys).as_py() != len(keys):
            return None
        if not found.any():
            return c
        n = c.capacity
        if not overwrite:
            keep = pa.array(~found)
            return StreamChunk(
                c.ops[~found], [col.filter(keep) for col in c.columns], length=int((~found).sum())
            )
        # each found row becomes U-(stored), U+(input); the others stay inserts
        reps = np.where(found, 2, 1)
        out_n = int(reps.sum())
        row = np.repeat(np.arange(n), reps)
        first = np.ones(out_n, np.bool_)
        first[1:] = row[1:] != row[:-1]
        is_old = found[row] & first
        ops = np.where(found[row], np.where(is_old, Op.UPDATE_DELETE, Op.UPDATE_INSERT), Op.INSERT).astype(
            np.int8
        )
        gather = pa.array(np.where(is_old, n + row, row))
        cols = [
            pa.concat_arrays([a, b.cast(a.type)]).take(gather) for a, b in zip(c.columns, stored, strict=True)
        ]
        return StreamChunk(ops, cols, length=out_n)

    def _resolve_conflicts(self, c: StreamChunk) -> StreamChunk:
        d = self.desc
        pk_cols = [c.columns[i] for i in d.pk]
        key_r = memcomparable.encode_columns(pk_cols, d.pk_types, list(d.pk_orders))
        found, stored_chunk = self.state.get_rows(pk_cols)
        stored = stored_chunk.columns
        overwrite = self.conflict is ConflictBehavior.OVERWRITE
        fast = self._inserts_of_distinct_keys(c, key_r, found, stored, overwrite)
        if fast is not None:
            return fast
        keys = key_r.to_list()
        # Per-row Python: several ops on one key within a chunk must see each other's effect.
        current: dict[bytes, tuple[str, int] | None] = {}
        for i, k in enumerate(keys):
            if k not in current:
                current[k] = ("stored", i) if found[i] else None
        src: list[int] = []  # 0 = input row, 1 = stored row
        idx: list[int] = []
        ops: list[int] = []

        def emit(where: tuple[str, int], op: Op) -> None:
            src.append(1 if where[0] == "stored" else 0)
            idx.append(where[1])
            ops.append(op)

        op_list = c.ops.tolist()
        for i, (op, k) in enumerate(zip(op_list, keys, strict=True)):
            cur = current[k]
            if op in (Op.INSERT, Op.UPDATE_INSERT):
                if cur is None:
                    emit(("input", i), Op.INSERT)
                    current[k] = ("input", i)
                elif overwrite:
                    emit(cur, Op.UPDATE_DELETE)
                    emit(("input", i), Op.UPDATE_INSERT)
                    current[k] = ("input", i)
            elif overwrite and op == Op.UPDATE_DELETE and i + 1 < len(keys) and keys[i + 1] == k:
                continue  # the following U+ of the same key overwrites the stored row
            elif cur is not None:
                emit(cur, Op.DELETE)
                current[k] = None
        if not ops:
            return StreamChunk(np.zeros(0, np.int8), [col.slice(0, 0) for col in c.columns], length=0)
        src_a = np.array(src, np.int64)
        idx_a = np.array(idx, np.int64)
        n = c.capacity
        # gather from [input rows ; stored rows] in one take per column
        gather = pa.array(np.where(src_a == 0, idx_a, n + idx_a))
        cols = [
            pa.concat_arrays([a, b.cast(a.type)]).take(gather) for a, b in zip(c.columns, stored, strict=True)
        ]
        return StreamChunk(np.array(ops, np.int8), cols, length=len(ops))
