"""Reading watermarks: a filter's global watermark, and a derived column's bound (plan/watermark).

A WatermarkFilter's state table holds one row per filter actor (the largest watermark it has
seen). The global watermark is the max over those rows *as committed*: every actor of an epoch,
in any fragment, reads the same value (each task's storage sees the committed version plus only
its own writes), so filtering and state clean-up agree across actors and attempts.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.order import ASC
from piestream.common.scalar import Datum
from piestream.common.types import DataType
from piestream.encoding import memcomparable
from piestream.plan.watermark import ColumnWatermark
from piestream.storage.table.desc import TableDesc
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import ActorContext


def global_watermark(table: StateTable) -> Datum:
    """The max of the committed per-actor watermarks (None before any). The table has a row per
    filter actor, a handful: reading them as Python rows is one short scan per epoch."""
    values = [r[1] for r in table.scan() if r[1] is not None]
    return max(values) if values else None


#: Global watermarks by (data directory, filter table, committed epoch), shared by the actors of
#: this process: the value is a function of the committed state alone, so every actor of an epoch
#: that needs it (the filters, and each join, dedup or agg cleaning state) reads storage once per
#: process instead of once each. A handful of entries; the oldest go first.
_PROCESS_MEMO: dict[tuple[str, int, int], Datum] = {}
_PROCESS_MEMO_MAX = 256
_memo_lock = threading.Lock()


def committed_watermarks(ctx: ActorContext, tables: list[TableDesc]) -> dict[int, Datum]:
    """Each filter table's global watermark, read once per actor and epoch: from the epoch's plan
    when the driver knows it (`ctx.known_watermarks`, learnt from the actors' reports), else from
    storage (once per process and committed epoch: `_PROCESS_MEMO`). Every read happens before
    the epoch's own write of the table (a filter raises its row at the barrier, after reading),
    so it sees committed state."""
    memo = ctx.watermarks
    committed = ctx.storage.version.max_committed_epoch
    scope = ctx.storage.sstables.store.url
    for desc in tables:
        ctx.watermark_tables[desc.table_id] = desc
        if desc.table_id in memo:
            continue
        sent = ctx.known_watermarks.get(desc.table_id)
        if sent is not None:
            memo[desc.table_id] = decode_watermark(sent, desc)
            continue
        key = (scope, desc.table_id, committed)
        with _memo_lock:
            known = key in _PROCESS_MEMO
            value = _PROCESS_MEMO.get(key)
        if not known:
            value = global_watermark(ctx.state_table(desc))
            if committed > 0:
                with _memo_lock:
                    _PROCESS_MEMO[key] = value
                    while len(_PROCESS_MEMO) > _PROCESS_MEMO_MAX:
                        del _PROCESS_MEMO[next(iter(_PROCESS_MEMO))]
        memo[desc.table_id] = value
    return {d.table_id: memo[d.table_id] for d in tables}


def encode_watermark(value: Datum, desc: TableDesc) -> bytes:
    """A global watermark as the driver keeps it: memcomparable (ascending, so the byte order is
    the value order and the driver takes maxima without decoding), b"" for none."""
    return b"" if value is None else memcomparable.encode_datum(value, desc.types[1], ASC)


def decode_watermark(data: bytes, desc: TableDesc) -> Datum:
    return None if not data else memcomparable.decode_datum(data, 0, desc.types[1], ASC)[0]


def reported_watermarks(ctx: ActorContext) -> dict[int, bytes]:
    """Per filter table this actor read or raised this epoch: the larger of the committed global
    watermark it read and the value it raised its row to, encoded (`encode_watermark`). The max
    over an epoch's reports is the table's global watermark once the epoch commits: every
    reader read the same committed value, and only filters that read it raise their rows."""
    out = {}
    for table_id, desc in ctx.watermark_tables.items():
        values = [
            v for v in (ctx.watermarks.get(table_id), ctx.raised_watermarks.get(table_id)) if v is not None
        ]
        out[table_id] = encode_watermark(max(values) if values else None, desc)
    return out


def column_bound(ctx: ActorContext, wm: ColumnWatermark) -> Datum:
    """The committed bound of a watermarked column (None while a filter has no watermark yet)."""
    return wm.bound(committed_watermarks(ctx, [s.table for s in wm.sources]))


def cleaned_bound(ctx: ActorContext, table: StateTable, first_pk_type: DataType) -> Datum:
    """The bound `table` was cleaned to by its committed table watermark (one key per vnode, all
    equal: every actor cleans by the same bound), None before any: what an EOWC operator has
    emitted up to."""
    committed = ctx.storage.version.table_watermarks.get(table.desc.table_id)
    ranges = table.vnodes.ranges()
    key = None if committed is None or not ranges else committed.key_for_vnode(ranges[0][0])
    if key is None:
        return None
    return memcomparable.decode_datum(key, 0, first_pk_type, ASC)[0]


def below(col: pa.Array, bound: object) -> np.ndarray:
    """Which values of a watermarked column are below `bound` (NULL never is: it sorts last)."""
    less = pc.less(col, pa.scalar(bound, col.type))
    return np.asarray(pc.fill_null(less, False).to_numpy(zero_copy_only=False), np.bool_)
