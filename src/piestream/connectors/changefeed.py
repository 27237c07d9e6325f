"""Reading a subscription's change log (`piestream.plan.subscription`): cursors, the Python API
and the Spark streaming source all read through here.

A `Position` names the last change a reader consumed, as the log's pk ``(epoch, actor, seq)``;
`read_changes` returns the changes after it, up to a committed epoch, in commit order, as one
Arrow table of the upstream's visible columns plus ``op`` (insert / delete / update_delete /
update_insert) and ``epoch``. A reader whose position fell behind the retention window gets an
error, never a silent gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from piestream.common.chunk import DataChunk, Op
from piestream.common.epoch import PIESTREAM_EPOCH_UNIX_SEC, epoch_from_ms, epoch_to_unix_ms
from piestream.common.errors import PiestreamError
from piestream.common.order import ASC
from piestream.common.types import BIGINT, VARCHAR, DataType
from piestream.encoding import memcomparable
from piestream.frontend.catalog import Relation
from piestream.plan.subscription import LOG_EPOCH, LOG_META_COLUMNS, LOG_OP
from piestream.storage.hummock.store import HummockStorage
from piestream.storage.hummock.version import HummockVersion
from piestream.storage.table.key_range import Bound
from piestream.storage.table.storage_table import StorageTable

_INT_MAX = 2**31 - 1
_BIGINT_MAX = 2**63 - 1
#: ``rw_timestamp`` values (Unix milliseconds) are below this; epochs are far above it.
_MAX_UNIX_MS = 1 << 44

OP_NAMES = np.array(["", "insert", "delete", "update_delete", "update_insert"], dtype=object)
assert [OP_NAMES[int(o)] for o in Op] == ["insert", "delete", "update_delete", "update_insert"]


class SubscriptionOutOfRetention(PiestreamError):
    """The changes a reader asks for are older than the subscription keeps (or than it)."""

    sqlstate = "22000"  # data_exception


@dataclass(frozen=True, order=True)
class Position:
    """The last change consumed: a key of the log (``actor = -1``: nothing of `epoch` yet)."""

    epoch: int
    actor: int = _INT_MAX
    seq: int = _BIGINT_MAX

    @classmethod
    def after_epoch(cls, epoch: int) -> Position:
        """Every change of `epoch` and before consumed."""
        return cls(epoch, _INT_MAX, _BIGINT_MAX)

    @classmethod
    def before_epoch(cls, epoch: int) -> Position:
        """Nothing of `epoch` consumed yet (changes of earlier epochs were)."""
        return cls(epoch, -1, -1)

    @property
    def epoch_done(self) -> bool:
        return self.actor == _INT_MAX


def subscription_info(rel: Relation) -> tuple[Relation, int]:
    """(the subscription relation, its upstream id); raises unless `rel` is a subscription."""
    if rel.subscription is None:
        raise PiestreamError(f'"{rel.name}" is not a subscription', sqlstate="42809")
    return rel, rel.subscription.of


def since_position(since: str, sub: Relation, committed_epoch: int) -> Position:
    """Where a cursor declared with ``SINCE <since>`` starts (see `ast.DeclareSubscriptionCursor`)."""
    info = sub.subscription
    assert info is not None
    if since in ("now", "full"):
        return Position.after_epoch(committed_epoch)
    if since == "begin":
        return Position.before_epoch(info.start_epoch)  # `check_retained` moves it to the cutoff
    try:
        value = int(since)
    except ValueError:
        raise PiestreamError(f'invalid SINCE value "{since}"', sqlstate="22023") from None
    if value < _MAX_UNIX_MS:  # a rw_timestamp (Unix ms): changes of later milliseconds
        if value < PIESTREAM_EPOCH_UNIX_SEC * 1000:
            raise SubscriptionOutOfRetention(f"SINCE {value} is before the subscription's changes")
        return Position.before_epoch(epoch_from_ms(value + 1))
    return Position.after_epoch(value)


def _cutoff(version: HummockVersion, sub: Relation) -> bytes | None:
    """The log's retention watermark (memcomparable bytes of the oldest kept epoch), if any."""
    info = sub.subscription
    assert info is not None
    wm = version.table_watermarks.get(info.log_table.table_id)
    return None if wm is None else wm.key_for_vnode(0)


def _epoch_key(epoch: int) -> bytes:
    return memcomparable.encode_datum(epoch, BIGINT, ASC)


def retained_start(version: HummockVersion, sub: Relation, pos: Position) -> Position:
    """`pos` if every change after it is still in the log; a ``begin()`` position moved up to
    the oldest retained epoch; otherwise `SubscriptionOutOfRetention`."""
    info = sub.subscription
    assert info is not None
    begin = pos == Position.before_epoch(info.start_epoch)
    if pos.epoch < info.start_epoch and not begin:
        raise SubscriptionOutOfRetention(
            f'subscription "{sub.name}" has no changes before epoch {info.start_epoch} '
            f"(it was created then); requested position is epoch {pos.epoch}"
        )
    cutoff = _cutoff(version, sub)
    if cutoff is not None and _epoch_key(pos.epoch) < cutoff:
        if begin:
            cut_epoch, _ = memcomparable.decode_datum(cutoff, 0, BIGINT, ASC)
            assert isinstance(cut_epoch, int)
            return Position.before_epoch(cut_epoch)
        raise SubscriptionOutOfRetention(
            f'changes after epoch {pos.epoch} are no longer retained by subscription "{sub.name}" '
            f"(retention {info.retention_ms // 1000} s)",
        )
    return pos


@dataclass
class Changes:
    """Changes read from a log: rows (visible columns, ``op``, ``epoch``) and where they end."""

    table: pa.Table
    position: Position  # the last change returned, or the read's end when it reached it


def change_schema(upstream: Relation) -> list[tuple[str, DataType]]:
    """The columns of a change row: the upstream's visible columns, ``op``, ``epoch``."""
    return [*((c.name, c.data_type) for c in upstream.visible_columns), ("op", VARCHAR), ("epoch", BIGINT)]


def read_changes(
    storage: HummockStorage,
    read_epoch: int,
    sub: Relation,
    upstream: Relation,
    after: Position,
    *,
    upto_epoch: int | None = None,
    limit: int | None = None,
) -> Changes:
    """The changes after `after` of epochs up to `upto_epoch` (default: `read_epoch`, a
    committed epoch), at most `limit` rows, in commit order."""
    info = sub.subscription
    assert info is not None
    after = retained_start(storage.version, sub, after)
    upto = read_epoch if upto_epoch is None else min(upto_epoch, read_epoch)
    visible = [i for i, c in enumerate(upstream.columns) if not c.hidden]
    out_idx = [LOG_EPOCH, 1, 2, LOG_OP, *(LOG_META_COLUMNS + i for i in visible)]
    log = StorageTable(info.log_table, storage, read_epoch, out_idx)
    lo = Bound.exc(after.epoch, after.actor, after.seq)
    chunks: list[DataChunk] = []
    if after.epoch <= upto:
        chunks = list(log.iter_prefix((), (lo, Bound.inc(upto)), limit=limit))
    schema = change_schema(upstream)
    names = [n for n, _ in schema]
    if not chunks:
        empty = [pa.nulls(0, t.arrow) for _, t in schema]
        end = Position.after_epoch(upto) if after.epoch <= upto else after
        return Changes(pa.Table.from_arrays(empty, names=names), max(end, after))
    data = DataChunk.concat(chunks).compact()
    cols = data.columns
    n = data.capacity
    epochs = cols[0]
    ops = OP_NAMES[np.asarray(cols[3].to_numpy(zero_copy_only=False), dtype=np.int64)]
    table = pa.Table.from_arrays([*cols[4:], pa.array(ops, pa.string()), epochs], names=names)
    full = limit is not None and n >= limit
    last = Position(int(epochs[n - 1].as_py()), int(cols[1][n - 1].as_py()), int(cols[2][n - 1].as_py()))
    return Changes(table, last if full else Position.after_epoch(upto))


def rw_timestamp(epoch: int) -> int:
    """RisingWave's ``rw_timestamp`` of an epoch: its Unix milliseconds."""
    return epoch_to_unix_ms(epoch)
