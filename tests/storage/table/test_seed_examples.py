"""Seed 000's two read-path examples, word for word: the Get example and the Scan example.

Seed 000, "Read Path": executors read the latest written data, uncommitted data included; the
MemTable is fresher than shared storage, and State Table merges the two for point gets and scans.
"""

from __future__ import annotations

import pytest
from table_env import TableEnv

from piestream.common.errors import StateConsistencyError
from piestream.common.order import ASC
from piestream.common.types import INT
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.mem_table import KeyOpKind


def three_int_table(table_id: int = 1) -> TableDesc:
    """'the first column is the pk of relational table' (seed 000)."""
    return TableDesc(
        table_id,
        (ColumnDesc("a", INT), ColumnDesc("b", INT), ColumnDesc("c", INT)),
        pk=(0,),
        pk_orders=(ASC,),
        dist_key=(0,),
        read_prefix_len_hint=1,
    )


# ---------------------------------------------------------------------------------------------
# Get
# ---------------------------------------------------------------------------------------------
#
#     insert [1, 11, 111]
#     insert [2, 22, 222]
#     delete [2, 22, 222]
#     insert [3, 33, 333]
#
#     commit
#
#     insert [3, 3333, 3333]
#
#     Get(pk = 1): [1, 11, 111]
#     Get(pk = 2):  None
#     Get(pk = 3): [3, 3333, 3333]
#
# Which reading is faithful for the last line? The seed writes a bare `insert` of pk 3 after the
# row [3, 33, 333] was committed, and says only "a new record is inserted again". The MemTable
# holds just the current epoch's operations (reference §4.1), so for it pk 3 is a fresh key and
# the bare insert is a legal `Insert` op: with the default settings (no storage sanity check,
# like RisingWave's release builds) the literal sequence runs as written and the MemTable's
# Insert shadows the committed row, which is exactly what the seed's Get results show. We run
# the sequence literally (test_get_example_literal). A consistent executor (Materialize with
# ON CONFLICT overwrite) would instead emit U-[3,33,333] / U+[3,3333,3333]; that variant must
# read the same and becomes one `Update` op (test_get_example_as_upsert). With the storage
# sanity check on, the literal blind insert over a stored key is reported at commit
# (test_get_example_literal_rejected_by_storage_sanity_check).


def _first_epoch(t) -> None:  # type: ignore[no-untyped-def]
    t.insert_row((1, 11, 111))
    t.insert_row((2, 22, 222))
    t.delete_row((2, 22, 222))
    t.insert_row((3, 33, 333))


def _assert_get_results(t) -> None:  # type: ignore[no-untyped-def]
    assert t.get_row((1,)) == (1, 11, 111)
    assert t.get_row((2,)) is None
    assert t.get_row((3,)) == (3, 3333, 3333)


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpointed", "sealed-only"])
def test_get_example_literal(checkpoint: bool) -> None:
    env = TableEnv()
    t = env.state_table(three_int_table())
    _first_epoch(t)
    # insert then delete of pk 2 within one epoch cancels out: nothing reaches storage
    assert t.mem.get(t.serde.table_key_of_pk((2,))) is None
    e1 = env.barrier(t, checkpoint=checkpoint)  # "commit"
    assert len(t.mem) == 0
    t.insert_row((3, 3333, 3333))
    _assert_get_results(t)
    # the newer record is buffered in the MemTable, the committed one is still in storage
    assert t.mem.get(t.serde.table_key_of_pk((3,)))[0] is KeyOpKind.INSERT  # type: ignore[index]
    if checkpoint:
        snap = env.storage_table(three_int_table(), e1)
        assert snap.get_row((3,)) == (3, 33, 333)
        assert snap.get_row((2,)) is None
    # and the results hold after the next commit too
    e2 = env.barrier(t)
    _assert_get_results(t)
    snap = env.storage_table(three_int_table(), e2)
    assert sorted(snap.iter_rows()) == [(1, 11, 111), (3, 3333, 3333)]  # rows come per vnode


def test_get_example_as_upsert() -> None:
    env = TableEnv()
    t = env.state_table(three_int_table(), sanity_check_storage=True)
    _first_epoch(t)
    env.barrier(t)
    t.delete_row((3, 33, 333))
    t.insert_row((3, 3333, 3333))
    op = t.mem.get(t.serde.table_key_of_pk((3,)))
    assert op is not None and op[0] is KeyOpKind.UPDATE  # Delete(o) + Insert(n) = Update(o, n)
    _assert_get_results(t)
    e2 = env.barrier(t)
    _assert_get_results(t)
    assert sorted(env.storage_table(three_int_table(), e2).iter_rows()) == [(1, 11, 111), (3, 3333, 3333)]


def test_get_example_literal_rejected_by_storage_sanity_check() -> None:
    env = TableEnv()
    t = env.state_table(three_int_table(), sanity_check_storage=True)
    _first_epoch(t)
    env.barrier(t)
    t.insert_row((3, 3333, 3333))
    _assert_get_results(t)  # reads are the same ...
    with pytest.raises(StateConsistencyError):
        env.barrier(t)  # ... but flushing an Insert of a key storage holds is inconsistent


# ---------------------------------------------------------------------------------------------
# Scan
# ---------------------------------------------------------------------------------------------
#
# "Scan on relational table is implemented by StateTableIter, which is a merge iterator of
# MemTableIter and StorageIter. If a pk exists in both KV state store (shared storage) and memory
# (MemTable), result of MemTableIter is returned. ... StateTableIter will generate 1->4->5->6 in
# order."
#
# Storage holds committed rows 1, 2, 3, 5; the MemTable holds this epoch's uncommitted ops:
# delete 2, delete 3, insert 4, update 5 (a new value), insert 6. The merge yields 1, 4, 5, 6,
# with 5 carrying the MemTable's value.

STORAGE_ROWS = [(1, 10, 100), (2, 20, 200), (3, 30, 300), (5, 50, 500)]


def _scan_example(env: TableEnv, desc: TableDesc, checkpoint: bool):  # type: ignore[no-untyped-def]
    t = env.state_table(desc)
    for r in STORAGE_ROWS:
        t.insert_row(r)
    env.barrier(t, checkpoint=checkpoint)
    t.delete_row((2, 20, 200))
    t.delete_row((3, 30, 300))
    t.insert_row((4, 40, 400))
    t.update_row((5, 50, 500), (5, 55, 555))
    t.insert_row((6, 60, 600))
    return t


EXPECTED_SCAN = [(1, 10, 100), (4, 40, 400), (5, 55, 555), (6, 60, 600)]


@pytest.mark.parametrize("checkpoint", [True, False], ids=["storage=committed-SSTs", "storage=shared-buffer"])
def test_scan_example_singleton(checkpoint: bool) -> None:
    """A singleton table (one vnode): one merge over the whole pk order."""
    desc = TableDesc(
        2, (ColumnDesc("a", INT), ColumnDesc("b", INT), ColumnDesc("c", INT)), pk=(0,), pk_orders=(ASC,)
    )
    env = TableEnv()
    t = _scan_example(env, desc, checkpoint)
    assert list(t.iter_with_prefix()) == EXPECTED_SCAN
    assert [r[0] for r in t.scan()] == [1, 4, 5, 6]
    # chunks agree with rows
    rows = [r for c in t.iter_chunks_with_prefix() for r in c.to_rows(desc.types)]
    assert rows == EXPECTED_SCAN
    # after committing the ops, storage alone gives the same answer
    e = env.barrier(t)
    assert list(t.scan()) == EXPECTED_SCAN
    assert list(env.storage_table(desc, e).iter_rows()) == EXPECTED_SCAN


@pytest.mark.parametrize("checkpoint", [True, False], ids=["storage=committed-SSTs", "storage=shared-buffer"])
def test_scan_example_distributed(checkpoint: bool) -> None:
    """With a distribution key the rows spread over vnodes; a scan merges per vnode, and the set
    of rows (and each row's value) is still storage overlaid by the MemTable."""
    desc = three_int_table(3)
    env = TableEnv()
    t = _scan_example(env, desc, checkpoint)
    got = list(t.scan())
    assert sorted(got) == EXPECTED_SCAN
    for pk in (1, 4, 5, 6):  # each via its vnode's prefix scan
        assert list(t.iter_with_prefix((pk,))) == [r for r in EXPECTED_SCAN if r[0] == pk]
    for pk in (2, 3):
        assert list(t.iter_with_prefix((pk,))) == []
