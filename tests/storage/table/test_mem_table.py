"""MemTable: the per-epoch op buffer and its merge rules (reference §4.1, seed 000 write path).

Every row of the §4.1 table is a test case, in both the consistent mode (illegal sequences and
old-value mismatches raise `StateConsistencyError`, leaving the buffer as it was) and the
checks-off mode (the last operation decides what a read sees). Sorted iteration, `iter_range`
and `drain` are checked against a plain dict model over random op sequences.
"""

from __future__ import annotations

import bisect
import random

import pytest

from piestream.common.errors import StateConsistencyError
from piestream.storage.table.mem_table import KeyOpKind, MemTable

INS, DEL, UPD = KeyOpKind.INSERT, KeyOpKind.DELETE, KeyOpKind.UPDATE
K = b"\x00\x07key"

# ---------------------------------------------------------------------------------------------
# the merge table, row by row
# ---------------------------------------------------------------------------------------------


def _apply(m: MemTable, op: tuple) -> None:  # type: ignore[type-arg]
    kind = op[0]
    if kind == "insert":
        m.insert(K, op[1])
    elif kind == "delete":
        m.delete(K, op[1])
    else:
        m.update(K, op[1], op[2])


# (first op, second op, expected stored KeyOp or None = entry removed)
MERGES = [
    # none | any | stored as is
    ((), ("insert", b"n"), (INS, None, b"n")),
    ((), ("delete", b"o"), (DEL, b"o", None)),
    ((), ("update", b"o", b"n"), (UPD, b"o", b"n")),
    # Delete(o) | Insert(n) | Update(o, n)
    (("delete", b"o"), ("insert", b"n"), (UPD, b"o", b"n")),
    # Insert(v) | Delete(o) | removed
    (("insert", b"v"), ("delete", b"v"), None),
    # Update(o, n1) | Delete(x) | Delete(o)
    (("update", b"o", b"n1"), ("delete", b"n1"), (DEL, b"o", None)),
    # Insert(v) | Update(x, n) | Insert(n)
    (("insert", b"v"), ("update", b"v", b"n"), (INS, None, b"n")),
    # Update(o, n1) | Update(x, n2) | Update(o, n2)
    (("update", b"o", b"n1"), ("update", b"n1", b"n2"), (UPD, b"o", b"n2")),
]


@pytest.mark.parametrize(("first", "second", "expected"), MERGES)
def test_merge_rule(first: tuple, second: tuple, expected: tuple | None) -> None:  # type: ignore[type-arg]
    m = MemTable()
    if first:
        _apply(m, first)
    _apply(m, second)
    assert m.get(K) == expected
    assert (K in m) == (expected is not None)
    assert len(m) == (0 if expected is None else 1)
    # what a flush would see
    assert m.drain() == ([] if expected is None else [(K, expected)])
    assert len(m) == 0


def test_delete_insert_delete_is_delete_of_the_original() -> None:
    """Delete(o), Insert(n) = Update(o, n); a further Delete(n) = Delete(o): the key ends deleted
    and the old value the flush carries is still the storage one."""
    m = MemTable()
    m.delete(K, b"o")
    m.insert(K, b"n")
    m.delete(K, b"n")
    assert m.get(K) == (DEL, b"o", None)
    m.insert(K, b"n2")
    assert m.get(K) == (UPD, b"o", b"n2")


ILLEGAL = [
    # Insert/Update | Insert | "double insert"
    (("insert", b"v"), ("insert", b"n"), "double insert"),
    (("update", b"o", b"v"), ("insert", b"n"), "double insert"),
    (("delete", b"o"), ("insert", b"v"), None),  # legal (control)
    # Delete | Delete | "double delete"
    (("delete", b"o"), ("delete", b"o"), "double delete"),
    # Delete | Update | "update on deleted"
    (("delete", b"o"), ("update", b"o", b"n"), "update on deleted"),
]


@pytest.mark.parametrize(("first", "second", "error"), ILLEGAL)
def test_illegal_sequences_raise(first: tuple, second: tuple, error: str | None) -> None:  # type: ignore[type-arg]
    m = MemTable()
    _apply(m, first)
    before = m.get(K)
    if error is None:
        _apply(m, second)
        return
    with pytest.raises(StateConsistencyError, match=error):
        _apply(m, second)
    assert m.get(K) == before, "a rejected op must leave the buffered op unchanged"


def test_double_insert_after_delete_insert() -> None:
    m = MemTable()
    m.delete(K, b"o")
    m.insert(K, b"n")  # Update(o, n)
    with pytest.raises(StateConsistencyError, match="double insert"):
        m.insert(K, b"n2")


MISMATCHES = [
    # the old value a delete / update carries must equal the buffered new value byte for byte
    (("insert", b"v"), ("delete", b"x")),
    (("update", b"o", b"n1"), ("delete", b"o")),  # the *new* value is the current one, not o
    (("insert", b"v"), ("update", b"x", b"n")),
    (("update", b"o", b"n1"), ("update", b"x", b"n2")),
    (("delete", b"o"), ("insert", b"n")),  # -> Update(o, n) ...
]


@pytest.mark.parametrize(("first", "second"), MISMATCHES[:4])
def test_old_value_mismatch_raises(first: tuple, second: tuple) -> None:  # type: ignore[type-arg]
    m = MemTable()
    _apply(m, first)
    before = m.get(K)
    with pytest.raises(StateConsistencyError, match="old value"):
        _apply(m, second)
    assert m.get(K) == before


def test_old_value_mismatch_after_delete_insert() -> None:
    m = MemTable()
    m.delete(K, b"o")
    m.insert(K, b"n")
    with pytest.raises(StateConsistencyError, match="old value"):
        m.delete(K, b"o")  # the current value is n
    with pytest.raises(StateConsistencyError, match="old value"):
        m.update(K, b"o", b"z")
    m.update(K, b"n", b"z")
    assert m.get(K) == (UPD, b"o", b"z")


def test_error_names_the_key() -> None:
    m = MemTable()
    m.insert(K, b"v")
    with pytest.raises(StateConsistencyError, match=K.hex()):
        m.insert(K, b"v")


# ---------------------------------------------------------------------------------------------
# checks off: the last op wins
# ---------------------------------------------------------------------------------------------


def _visible(m: MemTable, key: bytes) -> bytes | str | None:
    """What a read sees: the new value, None if deleted, "absent" if the MemTable has nothing."""
    op = m.get(key)
    if op is None:
        return "absent"
    return None if op[0] is DEL else op[2]


SEQUENCES_OFF = [
    ([("insert", b"a"), ("insert", b"b")], b"b"),
    ([("update", b"o", b"a"), ("insert", b"b")], b"b"),
    ([("delete", b"o"), ("delete", b"x")], None),
    ([("delete", b"o"), ("update", b"x", b"n")], b"n"),
    ([("insert", b"a"), ("delete", b"zz")], "absent"),  # mismatching old value: ignored
    ([("insert", b"a"), ("update", b"zz", b"n")], b"n"),
    ([("update", b"o", b"a"), ("update", b"zz", b"n")], b"n"),
    ([("update", b"o", b"a"), ("delete", b"zz")], None),
    ([("insert", b"a"), ("insert", b"b"), ("delete", b"q"), ("insert", b"c")], b"c"),
]


@pytest.mark.parametrize(("ops", "visible"), SEQUENCES_OFF)
def test_checks_off_last_op_wins(ops: list, visible: bytes | str | None) -> None:  # type: ignore[type-arg]
    m = MemTable(check_consistency=False)
    for op in ops:
        _apply(m, op)
    assert _visible(m, K) == visible


def test_checks_off_never_raises_on_random_sequences() -> None:
    rnd = random.Random(7)
    keys = [bytes([0, i]) for i in range(5)]
    m = MemTable(check_consistency=False)
    last: dict[bytes, bytes | None] = {}
    for _ in range(3000):
        k = rnd.choice(keys)
        v = bytes([rnd.randrange(256)])
        r = rnd.random()
        if r < 0.4:
            m.insert(k, v)
            last[k] = v
        elif r < 0.7:
            m.delete(k, v)
            last[k] = None
        else:
            m.update(k, v, v + b"!")
            last[k] = v + b"!"
        got = _visible(m, k)
        # an Insert cancelled by a Delete leaves nothing buffered: a read falls through to
        # storage, which is right when the insert was this epoch's first op on the key
        assert got == last[k] or (got == "absent" and last[k] is None)


# ---------------------------------------------------------------------------------------------
# sorted iteration, ranges, drain (model-based)
# ---------------------------------------------------------------------------------------------


def _random_key(rnd: random.Random) -> bytes:
    return bytes([0, rnd.randrange(4)]) + bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 3)))


@pytest.mark.parametrize("seed", range(20))
def test_sorted_iteration_and_ranges_match_model(seed: int) -> None:
    rnd = random.Random(seed)
    m = MemTable()
    model: dict[bytes, tuple] = {}  # type: ignore[type-arg]
    for step in range(400):
        k = _random_key(rnd)
        cur = model.get(k)
        v = bytes([step % 256, rnd.randrange(256)])
        if cur is None:
            choice = rnd.choice(["insert", "delete", "update"])
            if choice == "insert":
                m.insert(k, v)
                model[k] = (INS, None, v)
            elif choice == "delete":
                m.delete(k, b"old")
                model[k] = (DEL, b"old", None)
            else:
                m.update(k, b"old", v)
                model[k] = (UPD, b"old", v)
        elif cur[0] is DEL:
            m.insert(k, v)
            model[k] = (UPD, cur[1], v)
        elif rnd.random() < 0.5:
            m.delete(k, cur[2])
            if cur[0] is INS:
                del model[k]
            else:
                model[k] = (DEL, cur[1], None)
        else:
            m.update(k, cur[2], v)
            model[k] = (cur[0], cur[1], v)
        if step % 25 == 0 or step == 399:
            assert len(m) == len(model)
            assert list(m.iter_range(None, None)) == sorted(model.items())
            for _ in range(5):
                a, b = sorted([_random_key(rnd), _random_key(rnd)])
                want = [(kk, op) for kk, op in sorted(model.items()) if a <= kk < b]
                assert list(m.iter_range(a, b)) == want
                assert list(m.iter_range(a, None)) == [
                    (kk, op) for kk, op in sorted(model.items()) if kk >= a
                ]
                assert list(m.iter_range(None, b)) == [(kk, op) for kk, op in sorted(model.items()) if kk < b]
            for kk, op in model.items():
                assert m.get(kk) == op
    drained = m.drain()
    assert drained == sorted(model.items())
    assert len(m) == 0 and m.nbytes == 0
    assert list(m.iter_range(None, None)) == []
    # the MemTable is reusable after a drain (next epoch)
    m.insert(b"\x00\x01", b"x")
    assert m.drain() == [(b"\x00\x01", (INS, None, b"x"))]


def test_sorted_keys_lists_only_buffered_keys() -> None:
    """`sorted_keys()` is the MemTable's key index; after an Insert is cancelled by a Delete the
    key is no longer buffered and must not be listed (iter_range and drain filter it, but any
    other user of sorted_keys — e.g. a reverse iterator — would see a ghost key)."""
    m = MemTable()
    m.insert(b"\x00\x01", b"a")
    m.insert(b"\x00\x02", b"b")
    assert m.sorted_keys() == [b"\x00\x01", b"\x00\x02"]
    m.delete(b"\x00\x01", b"a")  # Insert + Delete: removed
    assert len(m) == 1
    assert m.sorted_keys() == [b"\x00\x02"]


def test_iter_range_is_stable_while_ops_change() -> None:
    """Re-inserting a cancelled key and adding keys between reads keeps the order right."""
    m = MemTable()
    for i in (5, 1, 3):
        m.insert(bytes([0, i]), b"v")
    assert [k for k, _ in m.iter_range(None, None)] == [b"\x00\x01", b"\x00\x03", b"\x00\x05"]
    m.delete(b"\x00\x03", b"v")
    assert [k for k, _ in m.iter_range(None, None)] == [b"\x00\x01", b"\x00\x05"]
    m.insert(b"\x00\x03", b"w")
    m.insert(b"\x00\x04", b"w")
    assert [k for k, _ in m.iter_range(b"\x00\x02", b"\x00\x05")] == [b"\x00\x03", b"\x00\x04"]
    keys = [k for k, _ in m.iter_range(None, None)]
    assert keys == sorted(keys)
    assert bisect.bisect_left(keys, b"\x00\x04") == 2


def test_nbytes_grows_with_buffered_data_and_resets_on_drain() -> None:
    m = MemTable()
    assert m.nbytes == 0
    m.insert(b"\x00\x01" + b"k" * 10, b"v" * 100)
    n1 = m.nbytes
    assert n1 >= 110
    m.insert(b"\x00\x02", b"v" * 1000)
    assert m.nbytes >= n1 + 1000
    m.drain()
    assert m.nbytes == 0


def test_sorted_runs_orders_stably_and_marks_equal_keys() -> None:
    """The fold's sort: byte order, arrival order within a key, and equal keys told apart from
    keys that differ only by trailing zero bytes or length (words read past a key's end as 0)."""
    import random

    from piestream.encoding.ragged import Ragged
    from piestream.storage.hummock.key_index import padded_ragged
    from piestream.storage.table.mem_table import sorted_runs

    rng = random.Random(3)
    alphabet = [
        b"",
        b"\x00",
        b"\x00\x00",
        b"a",
        b"a\x00",
        b"ab",
        b"\x00" * 9,
        b"\x01" * 8 + b"\x00",
        b"\x01" * 8,
    ]
    for n in (1, 2, 5, 40, 300):
        prefix = bytes([rng.randint(0, 2)]) * rng.randint(0, 3)
        keys = [prefix + rng.choice(alphabet) + rng.choice(alphabet) for _ in range(n)]
        order, new_key = sorted_runs(*padded_ragged(Ragged.from_list(keys)))
        want = sorted(range(n), key=lambda i: keys[i])  # Python's sort is stable
        assert order.tolist() == want
        s = [keys[i] for i in want]
        assert new_key.tolist() == [True] + [s[i] != s[i - 1] for i in range(1, n)]


@pytest.mark.parametrize("varying", [1, 3, 8, 9, 12])
def test_sorted_runs_of_fixed_width_keys(varying: int) -> None:
    """Keys of one width (a chunk's vnode + fixed-width pk): sorted by their varying bytes alone
    when at most 8 positions vary, by every word otherwise; the same order and runs either way."""
    import numpy as np

    from piestream.encoding.ragged import Ragged
    from piestream.storage.hummock.key_index import padded_ragged
    from piestream.storage.table.mem_table import sorted_runs

    rng = np.random.default_rng(varying)
    width, n = 14, 2000
    base = rng.integers(0, 256, width, dtype=np.uint8)
    mat = np.tile(base, (n, 1))
    cols = rng.choice(width, varying, replace=False)
    # few distinct values per varying byte (0 and 255 included): many repeated keys
    mat[:, cols] = rng.choice(np.array([0, 1, 127, 255], np.uint8), (n, varying))
    keys = [bytes(row) for row in mat]
    order, new_key = sorted_runs(*padded_ragged(Ragged.from_list(keys)))
    want = sorted(range(n), key=lambda i: keys[i])
    assert order.tolist() == want
    s = [keys[i] for i in want]
    assert new_key.tolist() == [True] + [s[i] != s[i - 1] for i in range(1, n)]
