"""StateTable and StorageTable against a plain dict model (seed 000; reference §4, §4.1, §4.2).

The heart is a seeded random walk: legal inserts / deletes / updates / chunks drawn from the
model, barriers (checkpointed or only sealed), tiny spill thresholds, compaction, and after most
steps a read compared with the model — uncommitted point gets, `exists`, vectorized `get_rows`,
prefix scans with `Bound` sub-ranges over a composite pk with a DESC column and NULLs, full scans,
and StorageTable snapshot reads at older pinned epochs. Focused tests cover vnode ownership,
`write_chunk` vs row-at-a-time equivalence, epoch pairs, watermark cleaning, column pruning,
`scan_vnodes` and the storage sanity check.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from table_env import EPOCH_STEP, TableEnv, live_user_keys

from piestream.common.chunk import Op, StreamChunk
from piestream.common.epoch import EpochPair
from piestream.common.errors import StateConsistencyError
from piestream.common.order import ASC, ASC_NULLS_FIRST, DESC, DESC_NULLS_LAST, OrderType
from piestream.common.scalar import Datum, Row, columns_to_rows, rows_to_columns
from piestream.common.types import BIGINT, BOOLEAN, DOUBLE, INT, NUMERIC, TIMESTAMP, VARCHAR
from piestream.common.vnode import VnodeBitmap, split_vnodes
from piestream.storage.hummock import StorageOptions
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.key_range import Bound
from piestream.storage.table.state_table import StateTable
from piestream.storage.table.storage_table import StorageTable, chunk_rows

# ---------------------------------------------------------------------------------------------
# the tables under test
# ---------------------------------------------------------------------------------------------

COLUMNS = (
    ColumnDesc("g", INT),  # pk 0, ASC, the distribution key
    ColumnDesc("k", VARCHAR),  # pk 1, DESC (NULLS FIRST), nullable
    ColumnDesc("id", BIGINT),  # pk 2, ASC
    ColumnDesc("ts", TIMESTAMP),
    ColumnDesc("n", NUMERIC),
    ColumnDesc("d", DOUBLE),  # NaN, -0.0, infinities
    ColumnDesc("b", BOOLEAN),
)


def wide_desc(
    table_id: int = 10,
    *,
    key_only_pk: bool = False,
    vnode_count: int = 256,
    orders: tuple[OrderType, ...] = (ASC, DESC, ASC),
) -> TableDesc:
    """Composite pk (g, k, id), by default (ASC, DESC, ASC), distributed by g, filter on g. With
    `key_only_pk` the value holds only the non-pk columns and the pk is decoded from the key."""
    return TableDesc(
        table_id,
        COLUMNS,
        pk=(0, 1, 2),
        pk_orders=orders,
        dist_key=(0,),
        value_indices=(3, 4, 5, 6) if key_only_pk else None,
        vnode_count=vnode_count,
        read_prefix_len_hint=1,
    )


G_VALUES = [0, 1, 2, 3, -7]
K_VALUES = [None, "", "a", "ab", "b", "abcdefghij", "zz", "é"]
ID_VALUES = [-3, -1, 0, 1, 2, 5, 2**40]


def random_payload(rnd: random.Random) -> tuple[Datum, ...]:
    ts = rnd.choice(
        [
            None,
            dt.datetime(1969, 12, 31, 23, 59, 59, 999_999),
            dt.datetime(2024, 2, 29, 12, 0, 0, rnd.randrange(1_000_000)),
            dt.datetime(1, 1, 1),
        ]
    )
    n = rnd.choice(
        [
            None,
            decimal.Decimal(rnd.randrange(-(10**9), 10**9)).scaleb(-rnd.randrange(0, 6)),
            decimal.Decimal("1.10"),
            decimal.Decimal("0"),
        ]
    )
    d = rnd.choice([None, math.nan, -0.0, math.inf, -math.inf, rnd.uniform(-1e6, 1e6)])
    b = rnd.choice([None, True, False])
    return ts, n, d, b


def random_pk(rnd: random.Random) -> tuple[Datum, ...]:
    return rnd.choice(G_VALUES), rnd.choice(K_VALUES), rnd.choice(ID_VALUES)


# ---------------------------------------------------------------------------------------------
# the model's order: pk tuples compared the way the memcomparable encoding orders them
# ---------------------------------------------------------------------------------------------


@functools.total_ordering
class _Rev:
    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rev) and self.v == other.v

    def __lt__(self, other: _Rev) -> bool:
        return bool(other.v < self.v)

    def __hash__(self) -> int:
        return hash(self.v)


def col_key(v: Datum, order: OrderType) -> Any:
    if v is None:
        asc: tuple[Any, ...] = (1,) if order.nulls_largest else (-1,)
    else:
        asc = (0, v)
    return _Rev(asc) if order.descending else asc


def pk_key(values: Sequence[Datum], orders: Sequence[OrderType]) -> tuple[Any, ...]:
    return tuple(col_key(v, o) for v, o in zip(values, orders, strict=False))


def in_sub_range(
    after: Sequence[Datum], lo: Bound | None, hi: Bound | None, orders: Sequence[OrderType]
) -> bool:
    """Whether the pk columns after the prefix lie in the sub-range (bounds may be partial)."""
    if lo is not None:
        n = len(lo.values)
        a, b = pk_key(after[:n], orders[:n]), pk_key(lo.values, orders[:n])
        if a < b or (a == b and not lo.inclusive):
            return False
    if hi is not None:
        n = len(hi.values)
        a, b = pk_key(after[:n], orders[:n]), pk_key(hi.values, orders[:n])
        if a > b or (a == b and not hi.inclusive):
            return False
    return True


def norm(row: Row | None) -> Any:
    """Rows compared with NaN equal to NaN (decoded floats are new objects)."""
    if row is None:
        return None
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def norms(rows: Iterable[Row]) -> list[Any]:
    return [norm(r) for r in rows]


class Model:
    """pk -> full row, and the order a table scan yields rows in."""

    def __init__(self, desc: TableDesc, table: StateTable) -> None:
        self.desc = desc
        self.serde = table.serde
        self.rows: dict[tuple[Datum, ...], Row] = {}

    def pk(self, row: Row) -> tuple[Datum, ...]:
        return tuple(row[i] for i in self.desc.pk)

    def scan_order(self, rows: Iterable[Row]) -> list[Row]:
        """Vnode ascending, then pk order (what a full scan over all vnodes yields)."""
        orders = self.desc.pk_orders
        return sorted(rows, key=lambda r: (self.serde.vnode_of_row(r), pk_key(self.pk(r), orders)))

    def prefix_rows(
        self, rows: dict[tuple[Datum, ...], Row], prefix: Sequence[Datum], lo: Bound | None, hi: Bound | None
    ) -> list[Row]:
        n = len(prefix)
        orders = self.desc.pk_orders
        out = [
            r
            for pk, r in rows.items()
            if list(pk[:n]) == list(prefix) and in_sub_range(pk[n:], lo, hi, orders[n:])
        ]
        return sorted(out, key=lambda r: pk_key(self.pk(r), orders))


def random_bound(rnd: random.Random) -> Bound | None:
    if rnd.random() < 0.3:
        return None
    k = rnd.choice(K_VALUES)
    vals = (k,) if rnd.random() < 0.5 else (k, rnd.choice([*ID_VALUES, 3]))
    return Bound(vals, rnd.random() < 0.5)


# ---------------------------------------------------------------------------------------------
# the random walk
# ---------------------------------------------------------------------------------------------

SPILLS = [1 << 30, 1, 700, 5000]


def run_walk(seed: int, key_only_pk: bool, steps: int = 200) -> None:
    rnd = random.Random(seed)
    # 16 vnodes: a full scan merges storage per vnode, and the walk scans often. The pk-only-in-key
    # walks also flip every order, NULL placement included.
    orders = (DESC, ASC_NULLS_FIRST, DESC_NULLS_LAST) if key_only_pk else (ASC, DESC, ASC)
    desc = wide_desc(key_only_pk=key_only_pk, vnode_count=16, orders=orders)
    env = TableEnv(
        compaction=CompactionConfig(level0_trigger_sub_levels=rnd.choice([1, 2, 4])),
        options=StorageOptions(block_size=rnd.choice([256, 4096, 64 << 10])),
    )
    t = env.state_table(desc, spill_threshold=SPILLS[seed % len(SPILLS)])
    model = Model(desc, t)
    rows = model.rows
    snapshots: list[tuple[int, dict[tuple[Datum, ...], Row]]] = []
    types = desc.types

    def check_snapshots() -> None:
        for epoch, snap in rnd.sample(snapshots, min(3, len(snapshots))):
            st = StorageTable(desc, env.reader(), epoch)
            assert norms(st.iter_rows()) == norms(model.scan_order(snap.values())), f"snapshot {epoch}"
            g = rnd.choice(G_VALUES)
            lo, hi = random_bound(rnd), random_bound(rnd)
            assert norms(st.iter_rows((g,), (lo, hi))) == norms(model.prefix_rows(snap, (g,), lo, hi))
            pk = rnd.choice(list(snap)) if snap and rnd.random() < 0.7 else random_pk(rnd)
            assert norm(st.get_row(pk)) == norm(snap.get(pk))

    for step in range(steps):
        r = rnd.random()
        if r < 0.25 or not rows:  # insert a new pk
            pk = random_pk(rnd)
            if pk in rows:
                continue
            row = (*pk, *random_payload(rnd))
            t.insert_row(row)
            rows[pk] = row
        elif r < 0.37:  # delete
            pk = rnd.choice(list(rows))
            t.delete_row(rows.pop(pk))
        elif r < 0.49:  # update
            pk = rnd.choice(list(rows))
            new = (*pk, *random_payload(rnd))
            t.update_row(rows[pk], new)
            rows[pk] = new
        elif r < 0.57:  # a chunk of legal ops, U-/U+ pairs included
            ops: list[tuple[Op, Row]] = []
            for _ in range(rnd.randrange(1, 25)):
                pk = random_pk(rnd)
                if pk not in rows:
                    row = (*pk, *random_payload(rnd))
                    ops.append((Op.INSERT, row))
                    rows[pk] = row
                elif rnd.random() < 0.5:
                    ops.append((Op.DELETE, rows.pop(pk)))
                else:
                    new = (*pk, *random_payload(rnd))
                    ops += [(Op.UPDATE_DELETE, rows[pk]), (Op.UPDATE_INSERT, new)]
                    rows[pk] = new
            t.write_chunk(StreamChunk.from_rows(ops, types))
        elif r < 0.63:  # barrier
            if rnd.random() < 0.75:
                e = env.barrier(t)
                snapshots.append((e, dict(rows)))
                env.manager.pin_snapshot()
            else:
                env.barrier(t, checkpoint=False)
        elif r < 0.66:
            if env.compact():
                check_snapshots()
        elif r < 0.76:  # point reads of uncommitted state
            for _ in range(5):
                pk = rnd.choice(list(rows)) if rnd.random() < 0.6 else random_pk(rnd)
                assert norm(t.get_row(pk)) == norm(rows.get(pk)), f"step {step}: get_row{pk}"
                assert t.exists(pk) == (pk in rows)
        elif r < 0.81:  # vectorized gets
            pks = [rnd.choice(list(rows)) if rnd.random() < 0.6 else random_pk(rnd) for _ in range(12)]
            found, chunk = t.get_rows(rows_to_columns(pks, desc.pk_types))
            cols = chunk.columns
            assert found.tolist() == [pk in rows for pk in pks]
            got = columns_to_rows(cols, types)
            for pk, row in zip(pks, got, strict=True):
                assert norm(row) == (norm(rows[pk]) if pk in rows else (None,) * len(types))
        elif r < 0.95:  # prefix scans with sub-ranges
            g = rnd.choice(G_VALUES)
            lo, hi = random_bound(rnd), random_bound(rnd)
            want = norms(model.prefix_rows(rows, (g,), lo, hi))
            assert norms(t.iter_with_prefix((g,), (lo, hi))) == want, f"step {step}: ({g},) {lo} {hi}"
            k = rnd.choice(K_VALUES)
            lo2 = Bound((rnd.choice(ID_VALUES),), rnd.random() < 0.5) if rnd.random() < 0.5 else None
            want2 = norms(model.prefix_rows(rows, (g, k), lo2, None))
            assert norms(t.iter_with_prefix((g, k), (lo2, None))) == want2
            lim = rnd.randrange(1, 5)
            assert norms(t.iter_with_prefix((g,), (lo, hi), limit=lim)) == want[:lim]
        else:  # full scan
            assert norms(t.scan()) == norms(model.scan_order(rows.values()))
    e = env.barrier(t)
    snapshots.append((e, dict(rows)))
    assert norms(StorageTable(desc, env.reader(), e).iter_rows()) == norms(model.scan_order(rows.values()))
    env.compact()
    assert norms(t.scan()) == norms(model.scan_order(rows.values()))
    for epoch, snap in snapshots[-4:]:
        st = StorageTable(desc, env.reader(), epoch)
        assert norms(st.iter_rows()) == norms(model.scan_order(snap.values())), f"snapshot {epoch}"


@pytest.mark.parametrize("seed", range(12))
def test_random_walk_against_model(seed: int) -> None:
    run_walk(seed, key_only_pk=False)


@pytest.mark.parametrize("seed", range(100, 106))
def test_random_walk_against_model_pk_only_in_key(seed: int) -> None:
    """value_indices exclude the pk columns: the pk comes back from the key; pk orders
    (DESC, ASC NULLS FIRST, DESC NULLS LAST)."""
    run_walk(seed, key_only_pk=True)


# ---------------------------------------------------------------------------------------------
# sub-ranges, NULLs and DESC, deterministic
# ---------------------------------------------------------------------------------------------


def test_sub_ranges_on_desc_column_with_nulls() -> None:
    desc = wide_desc(11)
    env = TableEnv()
    t = env.state_table(desc)
    payload = (None, None, None, None)
    for k in K_VALUES:
        for i in (1, 2):
            t.insert_row((1, k, i, *payload))
    env.barrier(t)
    ks = [r[1] for r in t.iter_with_prefix((1,)) if r[2] == 1]
    # DESC = NULLS FIRST, then values descending (code point order of UTF-8 bytes)
    assert ks == [None, "é", "zz", "b", "abcdefghij", "ab", "a", ""]
    got = [(r[1], r[2]) for r in t.iter_with_prefix((1,), (Bound.inc(None), Bound.exc("b")))]
    assert got == [(None, 1), (None, 2), ("é", 1), ("é", 2), ("zz", 1), ("zz", 2)]
    got = [(r[1], r[2]) for r in t.iter_with_prefix((1,), (Bound.exc(None), Bound.inc("b", 1)))]
    assert got == [("é", 1), ("é", 2), ("zz", 1), ("zz", 2), ("b", 1)]
    got = [(r[1], r[2]) for r in t.iter_with_prefix((1,), (Bound.exc("ab", 1), Bound.inc("")))]
    assert got == [("ab", 2), ("a", 1), ("a", 2), ("", 1), ("", 2)]
    assert list(t.iter_with_prefix((1,), (Bound.inc("a"), Bound.inc("zz")))) == []  # inverted range
    # the same through the MemTable only (uncommitted) and through StorageTable
    t2 = env.state_table(wide_desc(12))
    for k in K_VALUES:
        for i in (1, 2):
            t2.insert_row((1, k, i, *payload))
    got = [(r[1], r[2]) for r in t2.iter_with_prefix((1,), (Bound.exc("ab", 1), Bound.inc("")))]
    assert got == [("ab", 2), ("a", 1), ("a", 2), ("", 1), ("", 2)]
    e = env.barrier(t2)
    st = env.storage_table(wide_desc(12), e)
    assert [(r[1], r[2]) for r in st.iter_rows((1,), (Bound.exc("ab", 1), Bound.inc("")))] == got


@pytest.mark.parametrize("order", [ASC, DESC, ASC_NULLS_FIRST, DESC_NULLS_LAST], ids=str)
def test_null_placement_in_scans(order: OrderType) -> None:
    desc = TableDesc(13, (ColumnDesc("a", INT), ColumnDesc("v", INT)), pk=(0,), pk_orders=(order,))
    env = TableEnv()
    t = env.state_table(desc)
    for a in (None, -5, 0, 7):
        t.insert_row((a, 1))
    want = sorted([None, -5, 0, 7], key=lambda v: col_key(v, order))
    assert [r[0] for r in t.scan()] == want
    env.barrier(t)
    assert [r[0] for r in t.scan()] == want
    assert t.get_row((None,)) == (None, 1)
    assert [r[0] for r in t.iter_with_prefix((), (Bound.inc(None), None))] == want[want.index(None) :]


def test_prefix_not_covering_the_distribution_key_scans_every_owned_vnode() -> None:
    """pk (w, id) distributed by id: a prefix (w,) does not determine the vnode, so the scan
    visits every owned vnode (rows in pk order within each vnode); `vnode=` narrows it to one."""
    desc = _int_desc(16)
    env = TableEnv()
    t = env.state_table(desc)
    rows = [(w, i, f"{w}.{i}") for w in range(4) for i in range(40)]
    for r in rows[::2]:
        t.insert_row(r)
    env.barrier(t)
    for r in rows[1::2]:
        t.insert_row(r)  # half committed, half buffered
    t.delete_row(rows[0])
    live = rows[1:]
    for w in range(4):
        got = list(t.iter_with_prefix((w,)))
        assert sorted(got) == [r for r in live if r[0] == w]
        vn = [t.serde.vnode_of_row(r) for r in got]
        assert vn == sorted(vn)
        got_lo = list(t.iter_with_prefix((w,), (Bound.exc(10), Bound.inc(20))))
        assert sorted(got_lo) == [r for r in live if r[0] == w and 10 < r[1] <= 20]
    v = t.serde.vnode_of_row(rows[5])
    assert sorted(t.iter_with_prefix((), vnode=v)) == sorted(r for r in live if t.serde.vnode_of_row(r) == v)
    e = env.barrier(t)
    st = env.storage_table(desc, e)
    for w in range(4):
        assert sorted(st.iter_rows((w,))) == [r for r in live if r[0] == w]


@pytest.mark.parametrize("value_indices", [(5, 0, 3, 4, 6), (6, 5, 4, 3), (2, 1, 0, 3, 4, 5, 6)])
def test_value_indices_in_any_order_and_partly_in_the_pk(value_indices: tuple[int, ...]) -> None:
    desc = TableDesc(
        17, COLUMNS, pk=(0, 1, 2), pk_orders=(ASC, DESC, ASC), dist_key=(0,), value_indices=value_indices
    )
    env = TableEnv()
    t = env.state_table(desc)
    rnd = random.Random(11)
    rows: dict[tuple[Datum, ...], Row] = {}
    while len(rows) < 60:
        pk = random_pk(rnd)
        rows[pk] = (*pk, *random_payload(rnd))
    half = list(rows.values())
    t.write_chunk(StreamChunk.from_rows([(Op.INSERT, r) for r in half[:30]], desc.types))
    for r in half[30:]:
        t.insert_row(r)
    model = Model(desc, t)
    assert norms(t.scan()) == norms(model.scan_order(rows.values()))
    e = env.barrier(t)
    for r in half[::7]:
        assert norm(t.get_row(r[:3])) == norm(r)
    found, chunk = t.get_rows(rows_to_columns([r[:3] for r in half], desc.pk_types))
    cols = chunk.columns
    assert found.all() and norms(columns_to_rows(cols, desc.types)) == norms(half)
    st = env.storage_table(desc, e, [2, 6, 1])
    assert norms(st.iter_rows()) == norms((r[2], r[6], r[1]) for r in model.scan_order(rows.values()))


# ---------------------------------------------------------------------------------------------
# spills
# ---------------------------------------------------------------------------------------------


def test_spills_shadow_earlier_writes_of_the_same_epoch() -> None:
    desc = TableDesc(
        14, (ColumnDesc("a", INT), ColumnDesc("v", VARCHAR)), pk=(0,), pk_orders=(ASC,), dist_key=(0,)
    )
    env = TableEnv()
    t = env.state_table(desc, spill_threshold=1)  # every write spills
    t.insert_row((1, "a"))
    assert len(t.mem) == 0 and env.storage.buffered_bytes() > 0
    t.update_row((1, "a"), (1, "b"))
    t.delete_row((1, "b"))
    t.insert_row((1, "c"))
    t.insert_row((2, "x"))
    t.delete_row((2, "x"))
    assert t.get_row((1,)) == (1, "c") and t.get_row((2,)) is None
    e = env.barrier(t)
    assert sorted(env.storage_table(desc, e).iter_rows()) == [(1, "c")]
    env.compact()
    assert sorted(env.storage_table(desc, e).iter_rows()) == [(1, "c")]


def test_try_flush_respects_the_threshold() -> None:
    desc = TableDesc(15, (ColumnDesc("a", INT), ColumnDesc("v", VARCHAR)), pk=(0,), pk_orders=(ASC,))
    env = TableEnv()
    t = env.state_table(desc, spill_threshold=10_000)
    t.insert_row((1, "x" * 100))
    assert len(t.mem) == 1
    for i in range(2, 200):
        t.insert_row((i, "x" * 100))
    assert len(t.mem) < 199  # spilled at least once
    assert len(list(t.scan())) == 199


def test_a_write_only_mem_table_spills_later_and_a_read_one_at_the_threshold() -> None:
    """Chunks nobody reads wait for `WRITE_ONLY_SPILL_FACTOR` times the threshold (one sort at
    the flush); once a read merged them, the MemTable spills at the threshold again. Reads and
    the committed table see every row either way."""
    from piestream.storage.table.state_table import WRITE_ONLY_SPILL_FACTOR

    desc = TableDesc(16, (ColumnDesc("a", INT), ColumnDesc("v", VARCHAR)), pk=(0,), pk_orders=(ASC,))
    env = TableEnv()
    t = env.state_table(desc, spill_threshold=2_000)

    def chunk(lo: int) -> StreamChunk:
        rows = [(Op.INSERT, (i, "x" * 20)) for i in range(lo, lo + 20)]
        return StreamChunk.from_rows(rows, [INT, VARCHAR])

    lo = 0
    while t.mem.nbytes <= 2_000:
        t.write_chunk(chunk(lo))
        lo += 20
    assert t.mem.write_only and env.storage.buffered_bytes() == 0, "written only: not spilled yet"
    while env.storage.buffered_bytes() == 0:
        t.write_chunk(chunk(lo))
        lo += 20
    assert t.mem.nbytes == 0 and lo * 30 > WRITE_ONLY_SPILL_FACTOR * 2_000 / 2
    while t.mem.nbytes <= 2_000:
        t.write_chunk(chunk(lo))
        lo += 20
    found, _ = t.get_rows([pa.array([0, lo - 1], pa.int32())])  # a read merges the chunks
    assert found.all() and not t.mem.write_only
    buffered = env.storage.buffered_bytes()
    t.write_chunk(chunk(lo))
    lo += 20
    assert t.mem.nbytes == 0 and env.storage.buffered_bytes() > buffered, "read: spilled at the threshold"
    assert t.mem.write_only, "a drain starts afresh"
    e = env.barrier(t)
    assert [r[0] for r in env.storage_table(desc, e).iter_rows()] == list(range(lo))


# ---------------------------------------------------------------------------------------------
# vnode ownership
# ---------------------------------------------------------------------------------------------


def _int_desc(table_id: int, watermark: bool = False) -> TableDesc:
    return TableDesc(
        table_id,
        (ColumnDesc("w", BIGINT), ColumnDesc("id", INT), ColumnDesc("v", VARCHAR)),
        pk=(0, 1),
        pk_orders=(ASC, ASC),
        dist_key=(1,),
        watermark_col=0 if watermark else None,
    )


def test_two_actors_own_half_of_the_vnodes_each() -> None:
    desc = _int_desc(20)
    env = TableEnv()
    halves = split_vnodes(2)
    a = StateTable(desc, env.storage, halves[0])
    b = StateTable(desc, env.storage, halves[1])
    for t in (a, b):
        t.init_epoch(EpochPair.initial(env.epoch))
    rows = [(w, i, f"r{w}.{i}") for w in range(3) for i in range(60)]
    owner = {r: (a if a.serde.vnode_of_row(r) in halves[0] else b) for r in rows}
    assert {id(o) for o in owner.values()} == {id(a), id(b)}
    for r in rows:
        owner[r].insert_row(r)
        other = b if owner[r] is a else a
        with pytest.raises(StateConsistencyError, match="not owned"):
            other.insert_row((r[0], r[1], "x"))
        with pytest.raises(StateConsistencyError, match="not owned"):
            other.delete_row(r)
        with pytest.raises(StateConsistencyError, match="not owned"):
            other.update_row(r, (r[0], r[1], "y"))
        with pytest.raises(StateConsistencyError, match="not owned"):
            other.write_chunk(StreamChunk.from_rows([(Op.INSERT, (r[0], r[1], "z"))], desc.types))
        with pytest.raises(StateConsistencyError, match="not owned"):
            list(other.iter_with_prefix((r[0], r[1])))
    mine_a = sorted(r for r in rows if owner[r] is a)
    mine_b = sorted(r for r in rows if owner[r] is b)
    assert sorted(a.scan()) == mine_a and sorted(b.scan()) == mine_b
    # a chunk mixing owned and unowned rows is refused as a whole
    mixed = StreamChunk.from_rows(
        [(Op.INSERT, (9, mine_a[0][1], "m")), (Op.INSERT, (9, mine_b[0][1], "m"))], desc.types
    )
    with pytest.raises(StateConsistencyError, match="not owned"):
        a.write_chunk(mixed)
    assert a.get_row((9, mine_a[0][1])) is None
    cur = env.epoch
    env.epoch += 1 << 16
    for t in (a, b):
        t.commit(EpochPair(env.epoch, cur))
    env.checkpoint(cur, {desc.table_id})
    assert sorted(a.scan()) == mine_a and sorted(b.scan()) == mine_b
    for r in mine_a[:5]:
        assert a.get_row(r[:2]) == r
    st = env.storage_table(desc, cur)
    assert sorted(st.iter_rows()) == sorted(rows)
    assert sorted(chunk_rows(st.scan_vnodes(halves[0]), desc.types)) == mine_a
    assert sorted(chunk_rows(st.scan_vnodes(halves[1]), desc.types)) == mine_b


def test_update_vnodes_requires_empty_memtable() -> None:
    desc = _int_desc(21)
    env = TableEnv()
    t = env.state_table(desc)
    t.insert_row((1, 1, "a"))
    with pytest.raises(StateConsistencyError):
        t.update_vnodes(split_vnodes(2)[0])
    env.barrier(t)
    t.update_vnodes(split_vnodes(2)[0])
    assert t.vnodes == split_vnodes(2)[0]


# ---------------------------------------------------------------------------------------------
# write_chunk == the same ops row at a time
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("key_only_pk", [False, True])
def test_write_chunk_equals_row_at_a_time(seed: int, key_only_pk: bool) -> None:
    rnd = random.Random(seed)
    desc_a = wide_desc(30, key_only_pk=key_only_pk)
    desc_b = wide_desc(31, key_only_pk=key_only_pk)
    env = TableEnv()
    a = env.state_table(desc_a)
    b = env.state_table(desc_b)
    rows: dict[tuple[Datum, ...], Row] = {}
    for epoch in range(4):
        for _ in range(6):
            ops: list[tuple[Op, Row]] = []
            for _ in range(rnd.randrange(1, 40)):
                pk = random_pk(rnd)
                if pk not in rows:
                    row = (*pk, *random_payload(rnd))
                    ops.append((Op.INSERT, row))
                    rows[pk] = row
                elif rnd.random() < 0.5:
                    ops.append((Op.DELETE, rows.pop(pk)))
                else:
                    new = (*pk, *random_payload(rnd))
                    ops += [(Op.UPDATE_DELETE, rows[pk]), (Op.UPDATE_INSERT, new)]
                    rows[pk] = new
            chunk = StreamChunk.from_rows(ops, desc_a.types)
            if rnd.random() < 0.3:  # invisible rows are not applied
                junk = StreamChunk.from_rows(
                    [(Op.DELETE, (99, "junk", 0, None, None, None, None))], desc_a.types
                )
                chunk = StreamChunk.concat([chunk, junk.with_visibility(np.zeros(1, np.bool_))])
            a.write_chunk(chunk)
            for op, row in ops:
                if op in (Op.INSERT, Op.UPDATE_INSERT):
                    b.insert_row(row)
                else:
                    b.delete_row(row)
            # identical buffered ops: same keys, same op kinds, same old and new value bytes
            assert list(a.mem.iter_range(None, None)) == list(b.mem.iter_range(None, None))
        assert norms(a.scan()) == norms(b.scan())
        cur = env.epoch
        env.epoch += 1 << 16
        a.commit(EpochPair(env.epoch, cur))
        b.commit(EpochPair(env.epoch, cur))
        env.checkpoint(cur, {30, 31})
        ra = list(StorageTable(desc_a, env.reader(), cur).iter_prefix())
        rb = list(StorageTable(desc_b, env.reader(), cur).iter_prefix())
        assert norms(chunk_rows(iter(ra), desc_a.types)) == norms(chunk_rows(iter(rb), desc_b.types))
        assert len(list(a.scan())) == len(rows), f"epoch {epoch}"


def test_rows_written_by_chunk_can_be_deleted_row_at_a_time() -> None:
    """Vectorized and per-row encoders must agree byte for byte, or the old-value check fires."""
    desc = wide_desc(32)
    env = TableEnv()
    t = env.state_table(desc)
    rnd = random.Random(5)
    rows = {}
    while len(rows) < 40:
        pk = random_pk(rnd)
        rows[pk] = (*pk, *random_payload(rnd))
    t.write_chunk(StreamChunk.from_rows([(Op.INSERT, r) for r in rows.values()], desc.types))
    for r in list(rows.values())[:20]:
        t.delete_row(r)  # Insert(v) + Delete(v) with v from the other encoder
    for r in list(rows.values())[20:]:
        t.update_row(r, (*r[:3], None, None, None, None))
    assert len(t.mem) == 20


# ---------------------------------------------------------------------------------------------
# epochs
# ---------------------------------------------------------------------------------------------


def test_commit_checks_the_epoch_pair() -> None:
    desc = _int_desc(40)
    env = TableEnv()
    t = StateTable(desc, env.storage)
    with pytest.raises(StateConsistencyError):
        t.commit(EpochPair(2 << 16, 1 << 16))  # before init_epoch
    with pytest.raises(StateConsistencyError):
        _ = t.epoch
    t.init_epoch(EpochPair.initial(1 << 16))
    t.insert_row((1, 1, "a"))
    with pytest.raises(StateConsistencyError, match="pairs"):
        t.commit(EpochPair(3 << 16, 2 << 16))  # prev must be the current epoch
    assert len(t.mem) == 1, "a refused commit must not flush"
    t.commit(EpochPair(2 << 16, 1 << 16))
    with pytest.raises(StateConsistencyError):
        t.commit(EpochPair(3 << 16, 1 << 16))  # stale prev
    with pytest.raises(ValueError):
        EpochPair(2 << 16, 2 << 16)  # must advance
    t.commit(EpochPair(3 << 16, 2 << 16))
    assert t.epoch == 3 << 16


def test_writes_carry_the_ended_epoch() -> None:
    desc = _int_desc(41)
    env = TableEnv()
    t = env.state_table(desc)
    t.insert_row((1, 1, "a"))
    e1 = env.barrier(t)
    t.update_row((1, 1, "a"), (1, 1, "b"))
    e2 = env.barrier(t)
    t.delete_row((1, 1, "b"))
    env.manager.pin_snapshot()
    e3 = env.barrier(t)
    assert env.storage_table(desc, e1).get_row((1, 1)) == (1, 1, "a")
    assert env.storage_table(desc, e2).get_row((1, 1)) == (1, 1, "b")
    assert env.storage_table(desc, e3).get_row((1, 1)) is None
    assert env.manager.version.table_committed_epoch[desc.table_id] == e3


# ---------------------------------------------------------------------------------------------
# watermark cleaning (reference §4.2)
# ---------------------------------------------------------------------------------------------


def _watermark_table(env: TableEnv, table_id: int, orders: tuple[OrderType, OrderType] = (ASC, ASC)):  # type: ignore[no-untyped-def]
    desc = TableDesc(
        table_id,
        (ColumnDesc("w", BIGINT), ColumnDesc("id", INT), ColumnDesc("v", VARCHAR)),
        pk=(0, 1),
        pk_orders=orders,
        dist_key=(1,),
        watermark_col=0,
        read_prefix_len_hint=2,
    )
    t = env.state_table(desc)
    rows = [(w, i, f"v{w}") for w in range(0, 100, 5) for i in range(4)]
    for r in rows:
        t.insert_row(r)
    return desc, t, rows


def test_watermark_cleans_rows_below_it() -> None:
    env = TableEnv(compaction=CompactionConfig(level0_trigger_sub_levels=1))
    desc, t, rows = _watermark_table(env, 50)
    e1 = env.barrier(t)
    pin = env.manager.pin_snapshot()
    t.update_watermark(50)
    t.insert_row((200, 1, "new"))
    e2 = env.barrier(t)
    assert desc.table_id in env.manager.version.table_watermarks
    live = sorted([r for r in rows if r[0] >= 50] + [(200, 1, "new")])
    # the streaming side: point gets and scans
    for r in rows:
        assert t.get_row(r[:2]) == (r if r[0] >= 50 else None), r
        assert t.exists(r[:2]) == (r[0] >= 50)
    assert sorted(t.scan()) == live
    assert list(t.iter_with_prefix((10, 1))) == []
    assert list(t.iter_with_prefix((55, 1))) == [(55, 1, "v55")]
    # the batch side
    st = env.storage_table(desc, e2)
    assert sorted(st.iter_rows()) == live
    assert st.get_row((10, 1)) is None and st.get_row((50, 1)) == (50, 1, "v50")
    # logically hidden, physically present until compaction
    assert live_user_keys(env.reader(), desc.table_id, apply_watermarks=False) == len(rows) + 1
    assert live_user_keys(env.reader(), desc.table_id, apply_watermarks=True) == len(live)
    # while a snapshot older than the watermark is pinned, compaction keeps the rows it reads
    env.compact()
    assert live_user_keys(env.reader(), desc.table_id, apply_watermarks=False) == len(rows) + 1
    assert sorted(env.storage_table(desc, e1).iter_rows()) == sorted(rows)
    env.manager.unpin_snapshot(pin.pin_id)
    t.insert_row((300, 1, "later"))  # a new commit moves the low watermark past the watermark
    env.barrier(t)
    assert env.compact() > 0
    assert live_user_keys(env.reader(), desc.table_id, apply_watermarks=False) == len(live) + 1
    assert sorted(env.storage_table(desc, e2).iter_rows()) == live
    assert e1 < e2


def test_watermark_takes_effect_when_its_epoch_is_committed() -> None:
    """The watermark takes effect when the epoch it was set in is committed in meta: before
    that (buffered, or sealed but not checkpointed) nothing is hidden."""
    env = TableEnv()
    desc, t, _ = _watermark_table(env, 51)
    env.barrier(t)
    t.update_watermark(50)
    assert t.get_row((0, 0)) == (0, 0, "v0")  # not yet committed
    env.barrier(t, checkpoint=False)
    assert t.get_row((0, 0)) == (0, 0, "v0")  # sealed, not committed in meta
    env.checkpoint(env.epoch - (1 << 16), {desc.table_id})
    assert t.get_row((0, 0)) is None


def test_watermark_per_vnode_with_two_actors() -> None:
    env = TableEnv()
    desc = TableDesc(
        52,
        (ColumnDesc("w", BIGINT), ColumnDesc("id", INT), ColumnDesc("v", VARCHAR)),
        pk=(0, 1),
        pk_orders=(ASC, ASC),
        dist_key=(1,),
        watermark_col=0,
    )
    halves = split_vnodes(2)
    a = StateTable(desc, env.storage, halves[0])
    b = StateTable(desc, env.storage, halves[1])
    for t in (a, b):
        t.init_epoch(EpochPair.initial(env.epoch))
    rows = [(w, i, "x") for w in range(10) for i in range(30)]
    for r in rows:
        (a if a.serde.vnode_of_row(r) in halves[0] else b).insert_row(r)
    a.update_watermark(3)
    b.update_watermark(7)
    cur = env.epoch
    env.epoch += 1 << 16
    for t in (a, b):
        t.commit(EpochPair(env.epoch, cur))
    env.checkpoint(cur, {desc.table_id})
    want_a = sorted(r for r in rows if a.serde.vnode_of_row(r) in halves[0] and r[0] >= 3)
    want_b = sorted(r for r in rows if a.serde.vnode_of_row(r) in halves[1] and r[0] >= 7)
    assert sorted(a.scan()) == want_a
    assert sorted(b.scan()) == want_b
    assert sorted(env.storage_table(desc, cur).iter_rows()) == sorted(want_a + want_b)


def test_update_watermark_needs_a_watermark_column() -> None:
    env = TableEnv()
    t = env.state_table(_int_desc(53))
    with pytest.raises(StateConsistencyError):
        t.update_watermark(5)
    with pytest.raises(ValueError):
        TableDesc(54, COLUMNS, pk=(0, 1), pk_orders=(ASC, ASC), watermark_col=1)


def test_watermark_on_a_desc_column_is_rejected() -> None:
    """Watermark cleaning drops keys that encode below the watermark; for a DESC column the bytes
    are inverted, so cleaning would hit the live rows. Such tables are refused up front."""
    with pytest.raises(ValueError, match="ascending"):
        TableDesc(
            1,
            (ColumnDesc("w", BIGINT), ColumnDesc("id", INT)),
            pk=(0, 1),
            pk_orders=(DESC, ASC),
            dist_key=(1,),
            watermark_col=0,
        )


def test_watermark_does_not_change_older_snapshots() -> None:
    """DESIGN 'Epoch atomicity': a read at epoch E sees every change of epochs <= E and nothing
    after. Cleaning by a watermark committed at E2 is such a later change: a pinned snapshot at
    E1 < E2 must still read the rows (RisingWave reads the watermark that was in effect at the
    read epoch, and compaction only drops keys no pinned snapshot can read)."""
    env = TableEnv(compaction=CompactionConfig(level0_trigger_sub_levels=1))
    desc, t, rows = _watermark_table(env, 56)
    e1 = env.barrier(t)
    env.manager.pin_snapshot()
    t.update_watermark(50)
    env.barrier(t)
    assert sorted(env.storage_table(desc, e1).iter_rows()) == sorted(rows)


def test_watermark_never_moves_back() -> None:
    """Once a watermark cleaned rows they stay gone: a lower watermark later must neither bring
    back rows that were hidden (and, after compaction, may already be physically dropped) nor be
    silently accepted as the table's watermark. Either refusing it or keeping the maximum is fine."""
    env = TableEnv()
    desc, t, rows = _watermark_table(env, 57)
    env.barrier(t)
    t.update_watermark(50)
    env.barrier(t)
    try:
        t.update_watermark(30)
        e = env.barrier(t)
    except StateConsistencyError:
        return
    live = sorted(r for r in rows if r[0] >= 50)
    assert sorted(t.scan()) == live
    assert t.get_row((40, 1)) is None
    assert sorted(env.storage_table(desc, e).iter_rows()) == live


# ---------------------------------------------------------------------------------------------
# StorageTable: projection, vnode scans
# ---------------------------------------------------------------------------------------------


def _filled(env: TableEnv, desc: TableDesc, n: int = 200) -> tuple[StateTable, list[Row], int]:
    t = env.state_table(desc)
    rnd = random.Random(3)
    rows: dict[tuple[Datum, ...], Row] = {}
    while len(rows) < n:
        pk = random_pk(rnd)
        rows[pk] = (*pk, *random_payload(rnd))
    t.write_chunk(StreamChunk.from_rows([(Op.INSERT, r) for r in rows.values()], desc.types))
    e = env.barrier(t)
    return t, list(rows.values()), e


@pytest.mark.parametrize("key_only_pk", [False, True])
@pytest.mark.parametrize("output", [[0, 1, 2, 3, 4, 5, 6], [5, 0], [6], [2, 2, 1], [4, 3]])
def test_storage_table_column_pruning(key_only_pk: bool, output: list[int]) -> None:
    desc = wide_desc(60, key_only_pk=key_only_pk)
    env = TableEnv()
    t, rows, e = _filled(env, desc)
    st = env.storage_table(desc, e, output)
    assert st.output_types == [desc.types[i] for i in output]
    model = Model(desc, t)
    want = [tuple(r[i] for i in output) for r in model.scan_order(rows)]
    chunks = list(st.iter_prefix())
    assert all(len(c.columns) == len(output) for c in chunks)
    assert norms(chunk_rows(iter(chunks), st.output_types)) == norms(want)
    assert norms(st.iter_rows()) == norms(want)
    r = rows[7]
    assert norm(st.get_row(r[:3])) == norm(tuple(r[i] for i in output))
    g = r[0]
    want_g = [
        tuple(x[i] for i in output) for x in model.prefix_rows({x[:3]: x for x in rows}, (g,), None, None)
    ]
    assert norms(st.iter_rows((g,))) == norms(want_g)
    assert norms(chunk_rows(st.iter_prefix((g,), limit=3), st.output_types)) == norms(want_g[:3])


def test_scan_vnodes_is_the_union_of_per_vnode_rows() -> None:
    desc = wide_desc(61, vnode_count=16)
    env = TableEnv()
    t, rows, e = _filled(env, desc, 150)
    st = env.storage_table(desc, e)
    by_vnode: dict[int, list[Any]] = {}
    for r in rows:
        by_vnode.setdefault(t.serde.vnode_of_row(r), []).append(norm(r))
    rnd = random.Random(1)
    bitmaps = [
        VnodeBitmap.full(16),
        *split_vnodes(3, 16),
        VnodeBitmap.from_vnodes([0, 15], 16),
        VnodeBitmap.from_range(15, 16, 16),
        *[VnodeBitmap.from_vnodes(rnd.sample(range(16), rnd.randrange(1, 16)), 16) for _ in range(5)],
    ]
    for bm in bitmaps:
        got = norms(chunk_rows(st.scan_vnodes(bm), desc.types))
        want = [x for v in bm.vnodes().tolist() for x in by_vnode.get(v, [])]
        assert sorted(got, key=repr) == sorted(want, key=repr), bm
        # vnode order is kept: each vnode's rows come as one run, vnodes ascending
        vn = [t.serde.vnode_of_row(r) for r in chunk_rows(st.scan_vnodes(bm), desc.types)]
        assert vn == sorted(vn)
    parts = [x for bm in split_vnodes(4, 16) for x in norms(chunk_rows(st.scan_vnodes(bm), desc.types))]
    assert parts == norms(chunk_rows(st.scan(), desc.types))


def test_singleton_table() -> None:
    desc = TableDesc(62, (ColumnDesc("a", INT), ColumnDesc("v", DOUBLE)), pk=(0,), pk_orders=(DESC,))
    assert desc.vnode_count == 1
    env = TableEnv()
    t = env.state_table(desc)
    for a in range(5):
        t.insert_row((a, a / 2))
    assert [r[0] for r in t.scan()] == [4, 3, 2, 1, 0]
    e = env.barrier(t)
    st = env.storage_table(desc, e, [1])
    assert list(st.iter_rows()) == [(2.0,), (1.5,), (1.0,), (0.5,), (0.0,)]
    assert [r for c in st.scan_vnodes() for r in c.to_rows(st.output_types)] == list(st.iter_rows())


@pytest.mark.parametrize(("stored", "probe"), [(0.0, -0.0), (-0.0, 0.0), (math.nan, -math.nan)])
def test_float_pk_equal_values_are_one_key(stored: float, probe: float) -> None:
    """memcomparable canonicalizes -0.0 to +0.0 and every NaN to one NaN (reference §1.2), so
    these pairs are the same pk; the vnode must not tell them apart either, or a get of an equal
    pk looks in another vnode and a second insert creates a duplicate row (RisingWave hashes
    floats through OrderedFloat, which hashes -0.0 like 0.0 and all NaNs alike)."""
    desc = TableDesc(
        75, (ColumnDesc("f", DOUBLE), ColumnDesc("v", INT)), pk=(0,), pk_orders=(ASC,), dist_key=(0,)
    )
    env = TableEnv()
    t = env.state_table(desc)
    t.insert_row((stored, 1))
    assert t.exists((probe,))
    with pytest.raises(StateConsistencyError, match="double insert"):
        t.insert_row((probe, 2))


# ---------------------------------------------------------------------------------------------
# storage sanity check
# ---------------------------------------------------------------------------------------------


def test_sanity_check_catches_insert_of_a_stored_key() -> None:
    desc = _int_desc(70)
    env = TableEnv()
    t = env.state_table(desc, sanity_check_storage=True)
    t.insert_row((1, 1, "a"))
    t.insert_row((1, 2, "b"))
    env.barrier(t)
    t.insert_row((1, 1, "again"))  # the MemTable cannot know: storage holds the key
    with pytest.raises(StateConsistencyError, match="storage already holds"):
        env.barrier(t)


def test_sanity_check_catches_wrong_old_value_against_storage() -> None:
    desc = _int_desc(71)
    env = TableEnv()
    t = env.state_table(desc, sanity_check_storage=True)
    t.insert_row((1, 1, "a"))
    env.barrier(t)
    t.delete_row((1, 1, "not-a"))
    with pytest.raises(StateConsistencyError, match="differs from storage"):
        env.barrier(t)


def test_sanity_check_passes_legal_histories() -> None:
    desc = _int_desc(72)
    env = TableEnv()
    t = env.state_table(desc, sanity_check_storage=True, spill_threshold=300)
    rnd = random.Random(2)
    rows: dict[tuple[int, int], Row] = {}
    for _ in range(6):
        for _ in range(60):
            pk = (rnd.randrange(5), rnd.randrange(5))
            if pk not in rows:
                rows[pk] = (*pk, str(rnd.random()))
                t.insert_row(rows[pk])
            elif rnd.random() < 0.5:
                t.delete_row(rows.pop(pk))
            else:
                new = (*pk, str(rnd.random()))
                t.update_row(rows[pk], new)
                rows[pk] = new
        env.barrier(t)
    assert sorted(t.scan()) == sorted(rows.values())


def test_sanity_check_off_by_default() -> None:
    desc = _int_desc(73)
    env = TableEnv()
    t = env.state_table(desc)
    t.insert_row((1, 1, "a"))
    env.barrier(t)
    t.insert_row((1, 1, "b"))  # a blind overwrite
    e = env.barrier(t)
    assert env.storage_table(desc, e).get_row((1, 1)) == (1, 1, "b")


def test_update_row_must_keep_the_pk() -> None:
    env = TableEnv()
    t = env.state_table(_int_desc(74))
    t.insert_row((1, 1, "a"))
    with pytest.raises(StateConsistencyError, match="pk"):
        t.update_row((1, 1, "a"), (1, 2, "a"))


# ---------------------------------------------------------------------------------------------
# lenient consistency (RisingWave's non-strict default outside tests)
# ---------------------------------------------------------------------------------------------


def test_lenient_table_reports_inconsistent_ops_and_applies_them() -> None:
    """With `on_inconsistency`, a double insert, a double delete and ops contradicting storage are
    reported (what, how many, a key) and applied sanely (the last op wins); without it they raise."""
    desc = _int_desc(73)
    env = TableEnv()
    seen: list[tuple[int, str, int, str]] = []
    t = env.state_table(desc, sanity_check_storage=True, on_inconsistency=lambda *a: seen.append(a))
    t.insert_row((1, 1, "a"))
    t.insert_row((1, 1, "b"))  # double insert (single-row path)
    c = StreamChunk.from_rows([(Op.INSERT, (1, 2, "x")), (Op.INSERT, (1, 2, "y"))], desc.types)
    t.write_chunk(c)  # double insert (chunk path: found when the chunk is folded)
    env.barrier(t)
    assert [(tid, what) for tid, what, _, _ in seen] == [
        (73, "inconsistent op in state table: double insert"),
        (73, "inconsistent op in state table: double insert"),
    ]
    assert t.get_row((1, 1)) == (1, 1, "b") and t.get_row((1, 2)) == (1, 2, "y")
    seen.clear()
    t.insert_row((1, 1, "again"))  # storage holds the key: the insert overwrites it
    t.delete_row((1, 9, "never"))  # storage does not: a tombstone of nothing
    env.barrier(t)
    assert sorted(what for _, what, _, _ in seen) == [
        "inconsistent op in state table: delete of a key that storage does not hold",
    ] or sorted(what for _, what, _, _ in seen) == [
        "inconsistent op in state table: insert of a key that storage already holds",
    ]
    assert seen[0][2] == 2  # both counted
    assert t.get_row((1, 1)) == (1, 1, "again") and t.get_row((1, 9)) is None
    strict = env.state_table(desc)
    strict.insert_row((2, 1, "a"))
    with pytest.raises(StateConsistencyError, match="double insert"):
        strict.insert_row((2, 1, "b"))


def test_surely_empty_from_metadata_alone() -> None:
    """`surely_empty` is True only while no run of the storage (buffered, synced, committed) and
    no uncommitted write can hold the table; other tables' data does not count."""
    env = TableEnv()
    a = env.state_table(
        TableDesc(61, (ColumnDesc("a", INT), ColumnDesc("v", INT)), pk=(0,), pk_orders=(ASC,))
    )
    b = env.state_table(
        TableDesc(62, (ColumnDesc("a", INT), ColumnDesc("v", INT)), pk=(0,), pk_orders=(ASC,))
    )
    c = env.state_table(
        TableDesc(60, (ColumnDesc("a", INT), ColumnDesc("v", INT)), pk=(0,), pk_orders=(ASC,))
    )
    assert a.surely_empty() and b.surely_empty()
    b.insert_row((1, 1))
    assert not b.surely_empty(), "an uncommitted write"
    assert a.surely_empty()
    c.insert_row((1, 1))  # tables 60 and 62 around 61 in one epoch: their SSTs do not hold 61
    env.barrier(a, b, c)
    assert a.surely_empty() and not b.surely_empty() and not c.surely_empty()
    b.delete_row((1, 1))
    env.barrier(a, b, c)
    assert not b.surely_empty(), "tombstones: not known to be empty (a cache stays incomplete)"
    a.insert_row((2, 2))
    a.commit(EpochPair(env.epoch + EPOCH_STEP, env.epoch))  # buffered in the shared buffer only
    assert not a.surely_empty()
