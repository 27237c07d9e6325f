"""Per-row group ids of a chunk, computed vectorized from the group key columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.order import ASC
from piestream.common.types import DataType
from piestream.encoding import memcomparable


def group_ids(
    columns: Sequence[pa.Array], types: Sequence[DataType], n: int
) -> tuple[np.ndarray, list[bytes]]:
    """(group id per row, the groups' memcomparable keys); no key columns = one group `b""`."""
    if not columns:
        return np.zeros(n, np.int64), [b""]
    keys = memcomparable.encode_columns_arrow(list(columns), list(types), [ASC] * len(columns))
    enc = pc.dictionary_encode(keys)
    ids = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    return ids, enc.dictionary.to_pylist()
