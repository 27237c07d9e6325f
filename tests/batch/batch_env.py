"""Real tables for batch tests: rows written through StateTables, synced, committed in meta.

env = BatchEnv()
e1 = env.commit({desc: rows})                    # one epoch: inserts
e2 = env.commit({desc: rows2}, deletes={desc: old})
execute(plan, env.ctx())                         # reads at the last committed epoch
execute(plan, env.ctx(e1))                       # ... or at an older pinned one
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.batch import BatchContext
from piestream.common import numeric as nm
from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.numeric import is_numeric_array
from piestream.common.scalar import Row, columns_to_rows
from piestream.common.types import DataType
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock import HummockStorage, SstableStore
from piestream.storage.object_store import InMemoryObjectStore
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.state_table import StateTable

_names = itertools.count()


class BatchEnv:
    """An object store, a Hummock manager and a writer's storage; epochs committed for real."""

    def __init__(self) -> None:
        self.sstables = SstableStore(InMemoryObjectStore(f"batch-{next(_names)}"))
        self.manager = HummockManager(MetaStore(":memory:"), self.sstables)
        self.writer = HummockStorage(self.sstables, self.manager.version)
        self._ms = 1000
        self.committed = 0

    def commit(
        self,
        inserts: Mapping[TableDesc, Sequence[Sequence[Any]]] | None = None,
        deletes: Mapping[TableDesc, Sequence[Sequence[Any]]] | None = None,
    ) -> int:
        """Write one epoch (deletes first, then inserts), sync, commit; returns the epoch."""
        self._ms += 1000
        epoch = self._ms << 16
        tables: dict[int, StateTable] = {}
        for ops, op in ((deletes or {}, Op.DELETE), (inserts or {}, Op.INSERT)):
            for desc, rows in ops.items():
                t = tables.get(desc.table_id)
                if t is None:
                    t = tables[desc.table_id] = StateTable(desc, self.writer)
                    t.init_epoch(
                        EpochPair(epoch, self.committed) if self.committed else EpochPair.initial(epoch)
                    )
                if rows:
                    t.write_chunk(StreamChunk.from_rows([(op, r) for r in rows], desc.types))
        for t in tables.values():
            t.commit(EpochPair(epoch + (1 << 16), epoch))
        ssts = self.writer.sync(epoch)
        self.manager.commit_epoch(epoch, ssts, sorted(tables))
        self.writer.update_version(self.manager.version)
        self.committed = epoch
        return epoch

    def ctx(self, epoch: int | None = None) -> BatchContext:
        """A query's context: a reader at the committed version, pinned at `epoch` (default: last)."""
        reader = HummockStorage(self.sstables, self.manager.version)
        return BatchContext(reader, self.committed if epoch is None else epoch)


def rows_of(table: pa.Table, types: Sequence[DataType]) -> list[Row]:
    """Python rows of a result table (datums as piestream reads them)."""
    if not table.num_columns:
        return [()] * table.num_rows
    return columns_to_rows([c.combine_chunks() for c in table.columns], list(types))


def norm(v: Any) -> Any:
    """A value comparable across piestream and DuckDB: numbers as rounded floats, NaN as 'NaN'."""
    if v is None or isinstance(v, bool | str | bytes):
        return v
    if isinstance(v, int | float | Decimal | np.floating | np.integer):
        f = float(v)
        if f != f:
            return "NaN"
        return round(f, 6) if abs(f) < 1e15 else f
    if isinstance(v, list | tuple):
        return tuple(norm(x) for x in v)
    return v


def norm_rows(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return [tuple(norm(v) for v in r) for r in rows]


def sort_rows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a canonical order (for comparing multisets)."""
    return sorted(rows, key=lambda r: tuple((v is None, str(type(v)), str(v)) for v in r))


def arrow_of(desc: TableDesc, rows: Sequence[Sequence[Any]]) -> pa.Table:
    """The rows as an Arrow table named like the table's columns (DuckDB's view of them)."""
    from piestream.common.scalar import rows_to_columns

    return pa.Table.from_arrays(rows_to_columns(rows, desc.types), names=desc.column_names)


class Duck:
    """A DuckDB connection with Arrow tables registered under the given names (the oracle)."""

    def __init__(self, **tables: pa.Table) -> None:
        import duckdb

        self.con = duckdb.connect()
        for name, t in tables.items():
            self.con.register(name, duck_table(t))

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.con.execute(sql).fetchall()]


def duck_table(t: pa.Table) -> pa.Table:
    """`t` with each NUMERIC column as DuckDB's DECIMAL(38, s), s = the largest display scale in
    it (exact: DuckDB has one scale per column, piestream one per value; comparisons are by value)."""
    cols = []
    for c in t.columns:
        if not is_numeric_array(c):
            cols.append(c)
            continue
        values = nm.from_arrow(c)
        assert all(v is None or v.is_finite() for v in values), "DuckDB's DECIMAL has no NaN / Infinity"
        scale = max((-v.as_tuple().exponent for v in values if v is not None), default=0)  # type: ignore[operator]
        cols.append(pa.array(values, pa.decimal128(38, max(scale, 0))))
    return pa.table(cols, names=t.column_names)


def duck(sql: str, **tables: pa.Table) -> list[tuple[Any, ...]]:
    """Run one query in DuckDB over Arrow tables registered under the given names."""
    d = Duck(**tables)
    try:
        return d.rows(sql)
    finally:
        d.con.close()
