"""StorageTable: read-only, snapshot access to a table for batch queries (seed 000).

Reads happen at one committed epoch, so a query that reads several tables sees them all at the
same checkpoint (DESIGN "Epoch atomicity"). Point gets, pk-prefix and range scans, and full scans
of a vnode range (one Spark task reads its vnodes) return Arrow chunks holding only the columns
the caller asked for (seed 000: "output the partial columns upper level needs").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.scalar import Datum, Row
from piestream.common.vnode import VnodeBitmap
from piestream.encoding import memcomparable
from piestream.encoding.keys import TABLE_ID_LEN, VNODE_LEN, next_key
from piestream.encoding.ragged import Ragged, concat_rows
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.key_range import UNBOUNDED, SubRange, byte_range
from piestream.storage.table.row_serde import RowSerde


class StorageTable:
    """A table at a committed snapshot epoch, projected to `output_indices`."""

    def __init__(
        self,
        desc: TableDesc,
        storage: HummockStorage,
        epoch: int,
        output_indices: Sequence[int] | None = None,
    ) -> None:
        self.desc = desc
        self.storage = storage
        self.epoch = epoch
        self.serde = RowSerde(desc)
        self.output_indices = list(range(len(desc.columns)) if output_indices is None else output_indices)
        self._prefix = desc.table_id.to_bytes(TABLE_ID_LEN, "big")

    @property
    def output_types(self) -> list:
        return [self.desc.types[i] for i in self.output_indices]

    def _project(self, row: Row) -> Row:
        return tuple(row[i] for i in self.output_indices)

    # -- point gets -----------------------------------------------------------------------------
    def get_row(self, pk: Sequence[Datum]) -> Row | None:
        key = self.serde.table_key_of_pk(pk)
        hint = self.desc.read_prefix_len_hint
        flen = len(self.serde.encode_pk(list(pk[:hint]))) if hint and len(pk) >= hint else 0
        value = self.storage.get(self._prefix + key, self.epoch, filter_len=flen)
        return None if value is None else self._project(self.serde.decode_row(key, value))

    def get_rows(self, pk_columns: Sequence[pa.Array]) -> tuple[np.ndarray, DataChunk]:
        """`get_row` of a batch of pks as columns, at the snapshot epoch, in one storage call:
        (found mask, the projected rows; NULL where not found). A lookup join's probe."""
        from piestream.storage.table.state_table import decode_found, pk_keys

        key_r, flen = pk_keys(self.desc, pk_columns)
        user = concat_rows([Ragged.constant(key_r.n, self._prefix), key_r])
        found, values = self.storage.multi_get_columns(user, self.epoch, filter_lens=flen)
        rows = decode_found(self.serde, self.desc, key_r, found, values)
        return found, DataChunk([rows.columns[i] for i in self.output_indices], length=key_r.n)

    # -- scans ----------------------------------------------------------------------------------
    def iter_prefix(
        self, prefix: Sequence[Datum] = (), sub_range: SubRange = UNBOUNDED, *, limit: int | None = None
    ) -> Iterator[DataChunk]:
        """Rows whose pk starts with `prefix` (next columns within `sub_range`), in pk order per vnode."""
        n_prefix = len(prefix)

        def enc(values: tuple[Datum, ...]) -> bytes:
            k = len(values)
            return memcomparable.encode_row(
                list(values),
                self.desc.pk_types[n_prefix : n_prefix + k],
                list(self.desc.pk_orders[n_prefix : n_prefix + k]),
            )

        if self.desc.is_singleton:
            vnodes = [0]
        elif n_prefix >= self.desc.dist_prefix_len():
            vnodes = [self.serde.vnode_of_pk(prefix)]
        else:
            vnodes = list(range(self.desc.vnode_count))
        hint = self.desc.read_prefix_len_hint
        remaining = limit
        for v in vnodes:
            pk_prefix = v.to_bytes(VNODE_LEN, "big") + (self.serde.encode_pk(list(prefix)) if prefix else b"")
            start, end = byte_range(pk_prefix, sub_range, enc)
            fkey = self._prefix + pk_prefix if hint and n_prefix == hint else None
            for chunk in self._scan(start, end, fkey):
                if remaining is not None:
                    if chunk.cardinality >= remaining:
                        yield chunk.slice(0, remaining)
                        return
                    remaining -= chunk.cardinality
                yield chunk

    def iter_rows(self, prefix: Sequence[Datum] = (), sub_range: SubRange = UNBOUNDED) -> Iterator[Row]:
        types = self.output_types
        for chunk in self.iter_prefix(prefix, sub_range):
            yield from chunk.to_rows(types)

    def scan_vnodes(self, vnodes: VnodeBitmap | None = None) -> Iterator[DataChunk]:
        """Every row of the given vnodes (default: all), one key range per contiguous vnode run."""
        bitmap = vnodes if vnodes is not None else VnodeBitmap.full(self.desc.vnode_count)
        for lo, hi in bitmap.ranges():
            start = lo.to_bytes(VNODE_LEN, "big")
            end = hi.to_bytes(VNODE_LEN, "big") if hi < 2 ** (8 * VNODE_LEN) else None
            yield from self._scan(start, end, None)

    def scan(self) -> Iterator[DataChunk]:
        return self.scan_vnodes()

    def scan_keyed(self, start: bytes, end: bytes | None) -> Iterator[tuple[DataChunk, pa.Array]]:
        """Rows with table key in [start, end) in key order, each chunk with its table keys
        (``vnode | memcomparable(pk)``): a backfill resumes after the last key it emitted."""
        p = self._prefix
        storage_end = p + end if end is not None else next_key(p)
        for batch in self.storage.iter(p + start, storage_end, self.epoch):
            tkeys = batch.table_keys()
            cols = self.serde.decode(tkeys, batch.values, value_start=1)
            yield DataChunk([cols[i] for i in self.output_indices], length=len(batch)), tkeys

    def _scan(self, start: bytes, end: bytes | None, filter_key: bytes | None) -> Iterator[DataChunk]:
        p = self._prefix
        storage_end = p + end if end is not None else next_key(p)
        for batch in self.storage.iter(p + start, storage_end, self.epoch, filter_key=filter_key):
            tkeys = batch.table_keys()
            cols = self.serde.decode(tkeys, batch.values, value_start=1)  # past the tag byte
            yield DataChunk([cols[i] for i in self.output_indices], length=len(batch))


def chunk_rows(chunks: Iterator[DataChunk], types: list) -> list[Row]:
    out: list[Row] = []
    for c in chunks:
        out.extend(c.to_rows(types))
    return out
