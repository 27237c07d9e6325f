"""Turning a table's rows into Hummock keys and values and back (seed 000, one row = one KV pair).

Table key = ``vnode u16 BE | memcomparable(pk)``; the user key prefixes it with the table id. The
value is the value encoding of the table's value columns. Both directions exist for whole Arrow
columns (the hot path: `write_chunk`, scans) and for single Python rows (point operations).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from piestream.common.errors import DataCorruption
from piestream.common.scalar import Datum, Row
from piestream.encoding import memcomparable, value
from piestream.encoding.distribution import compute_vnode, compute_vnodes
from piestream.encoding.keys import TABLE_ID_LEN, VNODE_LEN
from piestream.encoding.ragged import Ragged, be_matrix, concat_rows
from piestream.storage.table.desc import TableDesc


class RowSerde:
    """Key/value codec of one table."""

    def __init__(self, desc: TableDesc) -> None:
        self.desc = desc
        self.table_prefix = desc.table_id.to_bytes(TABLE_ID_LEN, "big")
        self._pk_types = desc.pk_types
        self._orders = list(desc.pk_orders)
        self._value_types = desc.value_types
        self._dist_types = [desc.columns[i].data_type for i in desc.dist_key]
        self._key_only = [i for i in desc.pk if i not in desc.value_cols]

    # -- vectorized -----------------------------------------------------------------------------
    def vnodes(self, columns: Sequence[pa.Array]) -> np.ndarray:
        """The vnode of every row (full table rows as columns)."""
        n = len(columns[0]) if columns else 0
        if self.desc.is_singleton:
            return np.zeros(n, np.int64)
        return compute_vnodes(
            [columns[i] for i in self.desc.dist_key], self._dist_types, self.desc.vnode_count
        )

    def pk_bytes(self, columns: Sequence[pa.Array]) -> Ragged:
        n = len(columns[0]) if columns else 0
        return memcomparable.encode_columns(
            [columns[i] for i in self.desc.pk], self._pk_types, self._orders, num_rows=n
        )

    def table_keys(
        self, columns: Sequence[pa.Array], vnodes: np.ndarray | None = None
    ) -> tuple[Ragged, np.ndarray]:
        """(vnode | pk bytes, vnodes) of every row."""
        vn = self.vnodes(columns) if vnodes is None else vnodes
        head = Ragged.fixed(be_matrix(vn.astype(np.uint16), ">u2"))
        return concat_rows([head, self.pk_bytes(columns)]), vn

    def values(self, columns: Sequence[pa.Array]) -> Ragged:
        return value.encode_columns([columns[i] for i in self.desc.value_cols], self._value_types)

    def decode(
        self, table_keys: pa.Array | Ragged, values: pa.Array | Ragged, *, value_start: int = 0
    ) -> list[pa.Array]:
        """Full table rows (as columns) from table keys and encoded values (each read from byte
        `value_start`: 1 skips a HummockValue's tag without copying)."""
        ncols = len(self.desc.columns)
        out: list[pa.Array | None] = [None] * ncols
        vals = value.decode_values(
            values,
            self._value_types,
            value_start or None,
            required=self.desc.value_required,
            missing=self.desc.value_missing,
        )
        for i, col in zip(self.desc.value_cols, vals, strict=True):
            out[i] = col
        if self._key_only:
            keys = table_keys if isinstance(table_keys, Ragged) else Ragged.from_arrow(table_keys)
            pk_cols, _ = memcomparable.decode_keys(keys, self._pk_types, self._orders, VNODE_LEN)
            for pos, ci in enumerate(self.desc.pk):
                if out[ci] is None:
                    out[ci] = pk_cols[pos]
        assert all(c is not None for c in out)
        return out

    # -- one row --------------------------------------------------------------------------------
    def vnode_of_row(self, row: Sequence[Datum]) -> int:
        if self.desc.is_singleton:
            return 0
        return compute_vnode([row[i] for i in self.desc.dist_key], self._dist_types, self.desc.vnode_count)

    def vnode_of_pk(self, pk: Sequence[Datum]) -> int:
        """The vnode of a pk (or pk prefix covering the distribution key)."""
        if self.desc.is_singleton:
            return 0
        pos = self.desc.dist_key_in_pk
        if max(pos) >= len(pk):
            raise ValueError("the pk prefix does not cover the distribution key, so its vnode is unknown")
        return compute_vnode([pk[p] for p in pos], self._dist_types, self.desc.vnode_count)

    def encode_pk(self, pk: Sequence[Datum]) -> bytes:
        """memcomparable of a pk or a pk prefix."""
        n = len(pk)
        return memcomparable.encode_row(list(pk), self._pk_types[:n], self._orders[:n])

    def table_key_of_pk(self, pk: Sequence[Datum]) -> bytes:
        return self.vnode_of_pk(pk).to_bytes(VNODE_LEN, "big") + self.encode_pk(pk)

    def table_key_of_row(self, row: Sequence[Datum]) -> bytes:
        return self.vnode_of_row(row).to_bytes(VNODE_LEN, "big") + self.encode_pk(
            [row[i] for i in self.desc.pk]
        )

    def value_of_row(self, row: Sequence[Datum]) -> bytes:
        return value.encode_row([row[i] for i in self.desc.value_cols], self._value_types)

    def decode_row(self, table_key: bytes, value_bytes: bytes) -> Row:
        vals = value.decode_row(
            value_bytes, self._value_types, required=self.desc.value_required, missing=self.desc.value_missing
        )
        row: list[Datum] = [None] * len(self.desc.columns)
        for i, v in zip(self.desc.value_cols, vals, strict=True):
            row[i] = v
        if self._key_only:
            pk, end = memcomparable.decode_row(table_key, self._pk_types, self._orders, VNODE_LEN)
            if end != len(table_key):
                raise DataCorruption("table key has trailing bytes")
            for pos, ci in enumerate(self.desc.pk):
                if ci in self._key_only:
                    row[ci] = pk[pos]
        return tuple(row)

    def pk_of_row(self, row: Sequence[Datum]) -> Row:
        return tuple(row[i] for i in self.desc.pk)
