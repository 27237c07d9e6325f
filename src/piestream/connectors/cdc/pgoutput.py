"""A decoder of PostgreSQL's built-in logical replication output plugin, ``pgoutput`` (protocol
version 1, text-format tuples), and the column-wise conversion of decoded rows to Arrow.

Messages (PostgreSQL docs, "Logical Replication Message Formats"): Begin, Commit, Origin,
Relation, Type, Insert, Update, Delete, Truncate and Message. A tuple is a column count and per
column ``n`` (NULL), ``u`` (an unchanged TOASTed value, not sent) or ``t`` (text). An Update
carries the old tuple (``O``: REPLICA IDENTITY FULL, ``K``: the key changed) when the upstream
logs one; a Delete always does (``K``: the replica identity's columns, ``O``: every column).

Parsing a message is per message (a varying-length binary record has no columnar layout); the
conversion of the rows' text values to typed Arrow columns is per column (`to_arrow`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common import numeric as nm
from piestream.common.errors import PiestreamError
from piestream.common.types import DataType, TypeKind

#: A tuple value meaning "the upstream did not send it: an unchanged TOASTed value".
UNCHANGED = object()

TupleValue = str | None | object  # text, NULL, or UNCHANGED
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970


class PgOutputError(PiestreamError):
    """A pgoutput message piestream cannot decode (a protocol error, never a data error)."""

    sqlstate = "XX000"


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the LSN of the transaction's commit record
    commit_ts_us: int  # since 1970
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class RelColumn:
    name: str
    type_oid: int
    type_mod: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[RelColumn, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class TypeMsg:
    oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    oid: int
    new: tuple[TupleValue, ...]


@dataclass(frozen=True)
class Update:
    oid: int
    old: tuple[TupleValue, ...] | None  # with REPLICA IDENTITY FULL or a changed key
    old_kind: str | None  # "O" (the whole old row) | "K" (its key columns only) | None
    new: tuple[TupleValue, ...]


@dataclass(frozen=True)
class Delete:
    oid: int
    old: tuple[TupleValue, ...]
    old_kind: str  # "O" | "K"


@dataclass(frozen=True)
class Truncate:
    oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Begin | Commit | Origin | Relation | TypeMsg | Insert | Update | Delete | Truncate | LogicalMessage


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        s = struct.Struct(fmt)
        if self.pos + s.size > len(self.buf):
            raise PgOutputError(f"pgoutput message truncated at byte {self.pos}")
        v = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def byte(self) -> str:
        return chr(self.take("!B")[0])

    def string(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise PgOutputError("pgoutput string without its terminator")
        s = self.buf[self.pos : end].decode()
        self.pos = end + 1
        return s

    def tuple_data(self) -> tuple[TupleValue, ...]:
        (n,) = self.take("!h")
        out: list[TupleValue] = []
        buf = self.buf
        for _ in range(n):  # per column of one row: the wire format is sequential
            kind = chr(buf[self.pos])
            self.pos += 1
            if kind == "n":
                out.append(None)
            elif kind == "u":
                out.append(UNCHANGED)
            elif kind == "t":
                (length,) = self.take("!i")
                out.append(buf[self.pos : self.pos + length].decode())
                self.pos += length
            else:
                raise PgOutputError(
                    f"pgoutput tuple column of unknown kind {kind!r} (binary mode is not used)"
                )
        return tuple(out)


def decode(buf: bytes) -> Message:
    """One pgoutput message (the payload of one XLogData / one row of
    ``pg_logical_slot_peek_binary_changes``)."""
    if not buf:
        raise PgOutputError("empty pgoutput message")
    r = _Reader(buf)
    tag = r.byte()
    if tag == "B":
        lsn, ts, xid = r.take("!QqI")
        return Begin(lsn, ts + PG_EPOCH_US, xid)
    if tag == "C":
        flags, commit_lsn, end_lsn, ts = r.take("!BQQq")
        return Commit(flags, commit_lsn, end_lsn, ts + PG_EPOCH_US)
    if tag == "O":
        (lsn,) = r.take("!Q")
        return Origin(lsn, r.string())
    if tag == "R":
        (oid,) = r.take("!I")
        ns, name = r.string(), r.string()
        ident = r.byte()
        (n,) = r.take("!h")
        cols = []
        for _ in range(n):
            (flags,) = r.take("!B")
            cname = r.string()
            toid, tmod = r.take("!Ii")
            cols.append(RelColumn(cname, toid, tmod, bool(flags & 1)))
        return Relation(oid, ns or "pg_catalog", name, ident, tuple(cols))
    if tag == "Y":
        (oid,) = r.take("!I")
        return TypeMsg(oid, r.string(), r.string())
    if tag == "I":
        (oid,) = r.take("!I")
        if r.byte() != "N":
            raise PgOutputError("pgoutput Insert without its new tuple")
        return Insert(oid, r.tuple_data())
    if tag == "U":
        (oid,) = r.take("!I")
        kind = r.byte()
        old = None
        old_kind = None
        if kind in ("O", "K"):
            old, old_kind = r.tuple_data(), kind
            kind = r.byte()
        if kind != "N":
            raise PgOutputError("pgoutput Update without its new tuple")
        return Update(oid, old, old_kind, r.tuple_data())
    if tag == "D":
        (oid,) = r.take("!I")
        kind = r.byte()
        if kind not in ("O", "K"):
            raise PgOutputError("pgoutput Delete without its old tuple")
        return Delete(oid, r.tuple_data(), kind)
    if tag == "T":
        n, opts = r.take("!IB")
        oids = r.take(f"!{n}I")
        return Truncate(tuple(oids), bool(opts & 1), bool(opts & 2))
    if tag == "M":
        (flags,) = r.take("!B")
        (lsn,) = r.take("!Q")
        prefix = r.string()
        (length,) = r.take("!I")
        return LogicalMessage(bool(flags & 1), lsn, prefix, buf[r.pos : r.pos + length])
    raise PgOutputError(f"unknown pgoutput message type {tag!r}")


# -- upstream types --------------------------------------------------------------------------------

#: PostgreSQL type OIDs piestream follows, and the piestream type each maps to.
PG_TYPES: dict[int, TypeKind] = {
    16: TypeKind.BOOLEAN,
    21: TypeKind.SMALLINT,
    23: TypeKind.INT,
    20: TypeKind.BIGINT,
    1700: TypeKind.NUMERIC,
    700: TypeKind.REAL,
    701: TypeKind.DOUBLE,
    25: TypeKind.VARCHAR,  # text
    1043: TypeKind.VARCHAR,
    1042: TypeKind.VARCHAR,  # char(n)
    2950: TypeKind.VARCHAR,  # uuid: piestream has no UUID type; its text form is kept
    17: TypeKind.BYTEA,
    1082: TypeKind.DATE,
    1083: TypeKind.TIME,
    1114: TypeKind.TIMESTAMP,
    1184: TypeKind.TIMESTAMPTZ,
    1186: TypeKind.INTERVAL,
    3802: TypeKind.JSONB,
    114: TypeKind.JSONB,  # json
}
#: Array type OID -> element type OID.
PG_ARRAYS: dict[int, int] = {
    1000: 16, 1005: 21, 1007: 23, 1016: 20, 1231: 1700, 1021: 700, 1022: 701, 1009: 25,
    1015: 1043, 1014: 1042, 2951: 2950, 1001: 17, 1182: 1082, 1183: 1083, 1115: 1114,
    1185: 1184, 1187: 1186, 3807: 3802,
}  # fmt: skip


def compatible(upstream_oid: int, t: DataType) -> bool:
    """Whether a column of upstream type `upstream_oid` can feed a piestream column of type `t`."""
    if upstream_oid in PG_ARRAYS:
        return t.kind is TypeKind.LIST and t.elem is not None and compatible(PG_ARRAYS[upstream_oid], t.elem)
    kind = PG_TYPES.get(upstream_oid)
    if kind is None:
        return False
    if t.kind is TypeKind.SERIAL:
        return kind is TypeKind.BIGINT
    return kind is t.kind


# -- text values -> Arrow, per column --------------------------------------------------------------


@dataclass
class RowBuffer:
    """Decoded rows of one relation, as text, collected column by column (then one conversion
    per column, `to_arrow`)."""

    width: int
    columns: list[list[str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.columns = [[] for _ in range(self.width)]

    def append(self, values: Sequence[str | None]) -> None:
        for col, v in zip(self.columns, values, strict=True):  # per column of one row
            col.append(v)

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0


def to_arrow(texts: list[str | None] | pa.Array, t: DataType) -> pa.Array:
    """PostgreSQL text output of one column's values as an Arrow column of type `t` (PostgreSQL's
    input rules: piestream's text cast, column-wise)."""
    from piestream.expr.functions.cast import from_text

    col = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if t.kind is TypeKind.VARCHAR:
        return col
    if t.kind is TypeKind.BOOLEAN:  # pgoutput's text form of a bool is t / f
        return pc.equal(col, "t")
    if t.kind is TypeKind.NUMERIC:
        fast = _numeric_column(col)
        if fast is not None:
            return fast
    if t.kind in _ARROW_PARSES:
        try:  # PostgreSQL's canonical output of these parses with Arrow's own (vectorized) cast
            return col.cast(t.arrow)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # e.g. 'infinity', 'NaN': PostgreSQL's input rules below
    return from_text(col, t)


_ARROW_PARSES = frozenset(
    {TypeKind.SMALLINT, TypeKind.INT, TypeKind.BIGINT, TypeKind.REAL, TypeKind.DOUBLE, TypeKind.DATE,
     TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ}
)  # fmt: skip


_PLAIN_NUMERIC = r"^-?[0-9]+(\.[0-9]+)?$"


def _numeric_column(col: pa.Array) -> pa.Array | None:
    """PostgreSQL's output of plain NUMERIC values ('-12.340') column-wise: the digits without the
    point as decimal128(38, 0), the fraction digits as the scale. None when a value is not plain
    (NaN, Infinity) or has more than 28 digits (then PostgreSQL's input rules decide, per value:
    what piestream cannot store is 22003 there)."""
    live = col.fill_null("0")
    if len(col) == 0 or not pc.all(pc.match_substring_regex(live, _PLAIN_NUMERIC)).as_py():
        return None
    length = pc.binary_length(live)
    point = pc.find_substring(live, ".")
    has_point = pc.greater_equal(point, 0)
    scale = pc.if_else(has_point, pc.subtract(pc.subtract(length, point), 1), 0)
    digits = pc.subtract(
        length, pc.add(pc.cast(has_point, pa.int32()), pc.cast(pc.starts_with(live, "-"), pa.int32()))
    )
    if pc.max(digits).as_py() > 28:  # below 2**96 and a scale of at most 28 for sure
        return None
    unscaled = pc.replace_substring(live, ".", "").cast(pa.decimal128(38, 0))
    mask = pc.invert(col.is_valid()) if col.null_count else None
    storage = pa.StructArray.from_arrays(
        [unscaled, scale.cast(pa.int8())], fields=list(nm.NUMERIC_STORAGE), mask=mask
    )
    return nm.wrap(storage)


# -- a batch of messages at once -------------------------------------------------------------------

_T, _N, _U = ord("t"), ord("n"), ord("u")


@dataclass
class Batch:
    """Messages of one peek in one buffer: `data` (uint8, padded), message `starts` / `ends`
    and the tag byte of each (`tags`), so that the row messages decode column-wise."""

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    tags: np.ndarray

    @classmethod
    def of(cls, payloads: Sequence[bytes]) -> Batch:
        lens = np.fromiter(map(len, payloads), np.int64, len(payloads))
        if (lens == 0).any():
            raise PgOutputError("empty pgoutput message")
        ends = np.cumsum(lens)
        starts = ends - lens
        # padded so that reading a 4-byte length past a short last field stays in the buffer
        data = np.frombuffer(b"".join(payloads) + b"\0" * 8, np.uint8)
        return cls(data, starts, ends, data[starts] if len(starts) else np.zeros(0, np.uint8))

    @classmethod
    def of_buffer(cls, data: bytes, lens: np.ndarray) -> Batch:
        """Messages laid end to end in `data`, of lengths `lens` (a peek aggregated upstream:
        no Python object per message)."""
        lens = lens.astype(np.int64)
        if (lens <= 0).any():
            raise PgOutputError("empty pgoutput message")
        ends = np.cumsum(lens)
        if (int(ends[-1]) if len(lens) else 0) != len(data):
            raise PgOutputError("pgoutput messages and their lengths disagree")
        starts = ends - lens
        buf = np.frombuffer(data + b"\0" * 8, np.uint8)  # padded, as in `of`
        return cls(buf, starts, ends, buf[starts] if len(starts) else np.zeros(0, np.uint8))

    def __len__(self) -> int:
        return len(self.starts)

    def message(self, i: int) -> Message:
        return decode(self.data[self.starts[i] : self.ends[i]].tobytes())

    def be_u32(self, pos: np.ndarray) -> np.ndarray:
        d = self.data
        return (
            (d[pos].astype(np.uint32) << 24)
            | (d[pos + 1].astype(np.uint32) << 16)
            | (d[pos + 2].astype(np.uint32) << 8)
            | d[pos + 3].astype(np.uint32)
        )

    def tuples(self, pos: np.ndarray, end: np.ndarray, width: int) -> Tuples:
        """The tuple data starting at `pos` of each message (one per position, the message
        ending at `end`), column-wise: per column the kind byte, the value's start and length;
        with the position after it."""
        d = self.data
        if len(pos) and (pos + 2 > end).any():
            raise PgOutputError("pgoutput message truncated")
        n = (d[pos].astype(np.int32) << 8) | d[pos + 1].astype(np.int32)
        if len(pos) and (n != width).any():
            raise PgOutputError(f"pgoutput tuples of {int(n.min())} to {int(n.max())} columns, not {width}")
        at = pos + 2
        kinds, starts, lens = [], [], []
        for _ in range(width):  # per column, every message at once
            if (at >= end).any():
                raise PgOutputError("pgoutput message truncated")
            kind = d[at]
            is_t = kind == _T
            if not np.isin(kind, (_T, _N, _U)).all():
                raise PgOutputError("pgoutput tuple column of unknown kind (binary mode is not used)")
            length = np.where(is_t, self.be_u32(at + 1).astype(np.int64), 0)
            kinds.append(kind)
            starts.append(at + 5)
            lens.append(length)
            at = at + np.where(is_t, 5 + length, 1)
            if (at > end).any():
                raise PgOutputError("pgoutput message truncated")
        return Tuples(self, kinds, starts, lens, at)


@dataclass
class Tuples:
    """One tuple per message, column-wise (`Batch.tuples`)."""

    batch: Batch
    kinds: list[np.ndarray]  # per column: b"t" / b"n" / b"u" per message
    starts: list[np.ndarray]
    lens: list[np.ndarray]
    end: np.ndarray  # the position after each tuple

    def unchanged(self) -> np.ndarray:
        """Per message: whether a column was not sent (an unchanged TOASTed value)."""
        out = np.zeros(len(self.end), np.bool_)
        for k in self.kinds:
            out |= k == _U
        return out

    def column(self, i: int) -> pa.Array:
        """Column `i`'s text values (NULL where not sent) as one Arrow string array: the batch's
        buffer seen as a binary array whose even elements are the values and odd ones the bytes
        between them (offsets value start, value end, next start, ...: ascending, as the
        messages are), whose even elements Arrow's take then gathers."""
        valid = self.kinds[i] == _T
        n = len(valid)
        if n == 0:
            return pa.array([], pa.string())
        lo = np.where(valid, self.starts[i], self.starts[i] - 5)  # not sent: empty, at its kind
        bounds = np.empty(2 * n, np.int64)
        bounds[0::2] = lo
        bounds[1::2] = lo + np.where(valid, self.lens[i], 0)
        data = pa.py_buffer(self.batch.data)
        if len(self.batch.data) < 2**31:
            seen = pa.BinaryArray.from_buffers(
                pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds.astype(np.int32)), data]
            )
        else:
            seen = pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(bounds), data]
            )
        values = seen.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
        if values.type == pa.large_binary():
            values = values.cast(pa.binary())  # a column's own bytes stay far below 2 GB
        arr = values.cast(pa.string())  # validates UTF-8 (as the per-message decode's .decode())
        nulls = n - int(valid.sum())
        if nulls:
            mask = pa.py_buffer(np.packbits(valid, bitorder="little"))
            arr = pa.StringArray.from_buffers(n, arr.buffers()[1], arr.buffers()[2], mask, nulls, arr.offset)
        return arr
