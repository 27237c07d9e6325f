"""Model tests of the columnar state path: the MemTable's vectorized merge rules and batched
point lookups through the LSM, against plain Python models.

- `fold` (the §4.1 rules as vector operations) against a one-op-at-a-time reference over random
  op sequences, with checks on (legal and illegal sequences) and off; a deliberately broken rule
  must make the same check fail, so the check can catch a wrong rule.
- A StateTable driven by random chunks of inserts and deletes, random single-row updates, spills
  (a tiny spill threshold), barriers, checkpoints and compactions, read back with the batched
  `get_rows` (keys in MemTable, imms, L0 and levels; absent and repeated keys; small blocks so
  versions straddle block boundaries) and compared with a dict model after every step; and raw
  `HummockStorage.multi_get_columns` against the scalar `get` at random read epochs.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from table_env import TableEnv

from piestream.common.chunk import StreamChunk
from piestream.common.errors import StateConsistencyError
from piestream.common.order import ASC, DESC
from piestream.common.types import BIGINT, VARCHAR
from piestream.storage.hummock import StorageOptions
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.storage.table.mem_table import KeyOpKind, MemTable, Ops, fold
from piestream.storage.table.state_table import StateTable

INS, DEL, UPD = KeyOpKind.INSERT, KeyOpKind.DELETE, KeyOpKind.UPDATE

# ---------------------------------------------------------------------------------------------
# the reference: §4.1 one op at a time
# ---------------------------------------------------------------------------------------------

RefOp = tuple[KeyOpKind, bytes | None, bytes | None]


def ref_apply(state: dict[bytes, RefOp], key: bytes, op: RefOp, check: bool) -> None:
    kind, old, new = op
    e = state.get(key)
    if e is None:
        state[key] = op
        return
    ek, eo, en = e
    after_present = ek is not DEL
    before_present = kind is not INS
    if after_present != before_present:
        if check:
            what = "double insert" if kind is INS else "double delete" if kind is DEL else "update on deleted"
            raise StateConsistencyError(what)
    elif check and before_present and en != old:
        raise StateConsistencyError("old value")
    first_before = ek is not INS
    last_after = kind is not DEL
    if not first_before and not last_after:
        del state[key]  # Insert ... Delete: removed, the key is "none" again
    elif not first_before:
        state[key] = (INS, None, new)
    elif not last_after:
        state[key] = (DEL, eo, None)
    else:
        state[key] = (UPD, eo, new)


def random_ops(rnd: random.Random, n: int, keys: int, legal: bool) -> list[tuple[bytes, RefOp]]:
    """Random ops; with `legal`, each key follows its own present/absent state (with the right
    old values), else anything goes."""
    present: dict[bytes, bytes | None] = {}
    out = []
    for _ in range(n):
        k = bytes([0, rnd.randrange(keys)]) + (b"\x00" * rnd.randrange(2))  # trailing NULs matter
        v = rnd.randbytes(rnd.randrange(0, 14))
        if legal:
            cur = present.get(k, rnd.choice([None, b"s" + v]))
            if cur is None:
                op: RefOp = (INS, None, v)
                present[k] = v
            elif rnd.random() < 0.5:
                op = (DEL, cur, None)
                present[k] = None
            else:
                op = (UPD, cur, v)
                present[k] = v
        else:
            kind = rnd.choice([INS, DEL, UPD])
            op = (kind, None if kind is INS else rnd.choice([v, b"x"]), None if kind is DEL else v)
        out.append((k, op))
    return out


def as_ops(seq: list[tuple[bytes, RefOp]]) -> Ops:
    return Ops(
        pa.array([k for k, _ in seq], pa.binary()),
        np.array([op[0] for _, op in seq], np.int8),
        pa.array([op[1] or b"" for _, op in seq], pa.binary()),
        pa.array([op[2] or b"" for _, op in seq], pa.binary()),
    )


def check_fold_against_model(fold_fn: Callable[[Ops, bool], Ops], seeds: range) -> None:
    """Assert `fold_fn` equals the one-at-a-time reference on random sequences (AssertionError
    on the first difference)."""
    for seed in seeds:
        rnd = random.Random(seed)
        check = rnd.random() < 0.7
        seq = random_ops(rnd, rnd.randrange(1, 60), rnd.randrange(1, 8), legal=rnd.random() < 0.6)
        state: dict[bytes, RefOp] = {}
        ref_error = None
        try:
            for k, op in seq:
                ref_apply(state, k, op, check)
        except StateConsistencyError as e:
            ref_error = e
        try:
            got = fold_fn(as_ops(seq), check).to_list()
        except StateConsistencyError:
            assert ref_error is not None, f"seed {seed}: fold raised, the reference did not"
            continue
        assert ref_error is None, f"seed {seed}: the reference raised {ref_error}, fold did not"
        assert got == sorted(state.items()), f"seed {seed}"


def test_fold_matches_the_one_op_at_a_time_rules() -> None:
    check_fold_against_model(fold, range(600))


def test_flush_fold_without_old_values_keeps_keys_kinds_and_new_rows() -> None:
    """`fold(keep_old=False)` (a flush) equals the reference in everything a flush writes: keys,
    kinds and new rows; only the old values may be left out. Both the one-op-per-key path (shuffled
    distinct keys) and the general path are covered, and errors are raised as with old values."""

    def written(seq: list[tuple[bytes, RefOp]]) -> list[tuple[bytes, KeyOpKind, bytes | None]]:
        return [(k, kind, new) for k, (kind, _, new) in seq]

    def flush_fold(ops: Ops, check: bool) -> Ops:
        return fold(ops, check, keep_old=False)

    for seed in range(400):
        rnd = random.Random(seed)
        check = rnd.random() < 0.7
        seq = random_ops(rnd, rnd.randrange(1, 60), rnd.randrange(1, 8), legal=rnd.random() < 0.6)
        if seed % 4 == 0:  # one op per key, out of order
            seen: dict[bytes, tuple[bytes, RefOp]] = {}
            for k, op in seq:
                seen.setdefault(k, (k, op))
            seq = list(seen.values())
            rnd.shuffle(seq)
        state: dict[bytes, RefOp] = {}
        try:
            for k, op in seq:
                ref_apply(state, k, op, check)
        except StateConsistencyError:
            with pytest.raises(StateConsistencyError):
                flush_fold(as_ops(seq), check)
            continue
        got = flush_fold(as_ops(seq), check).to_list()
        assert written(got) == written(sorted(state.items())), f"seed {seed}"


def test_a_broken_merge_rule_is_caught() -> None:
    """Insert after Delete must become Update(o, n); a fold that keeps it an Insert is wrong, and
    the model check must say so."""

    def broken(ops: Ops, check: bool) -> Ops:
        out = fold(ops, check)
        kinds = out.kinds.copy()
        kinds[kinds == UPD] = INS
        return Ops(out.keys, kinds, out.old, out.new)

    with pytest.raises(AssertionError):
        check_fold_against_model(broken, range(600))


def test_memtable_chunks_and_rows_interleave_like_the_reference() -> None:
    """Chunks (insert/delete) and single-row ops (with update) in any interleaving give the same
    ops as applying everything one at a time, whether merged often or once."""
    for seed in range(150):
        rnd = random.Random(seed)
        seq = random_ops(rnd, rnd.randrange(1, 80), rnd.randrange(1, 10), legal=True)
        m = MemTable()
        state: dict[bytes, RefOp] = {}
        i = 0
        while i < len(seq):
            if rnd.random() < 0.5:  # a chunk of inserts/deletes
                j = i
                while j < len(seq) and j - i < 6 and seq[j][1][0] is not UPD:
                    j += 1
                part = seq[i:j]
                if part:
                    m.apply_batch(
                        pa.array([k for k, _ in part], pa.binary()),
                        pa.array([op[2] if op[0] is INS else op[1] for _, op in part], pa.binary()),
                        np.array([op[0] is INS for _, op in part]),
                        10,
                    )
                    for k, op in part:
                        ref_apply(state, k, op, True)
                    i = j
                    if rnd.random() < 0.3:
                        assert m.ops().to_list() == sorted(state.items()), seed
                    continue
            k, (kind, old, new) = seq[i]
            if kind is INS:
                m.insert(k, new)  # type: ignore[arg-type]
            elif kind is DEL:
                m.delete(k, old)  # type: ignore[arg-type]
            else:
                m.update(k, old, new)  # type: ignore[arg-type]
            ref_apply(state, k, seq[i][1], True)
            i += 1
        assert m.ops().to_list() == sorted(state.items()), seed
        d = m.drain_arrays()
        live = {k: op for k, op in state.items()}
        if d is None:
            assert not live
        else:
            assert d.keys.to_pylist() == sorted(live)
            assert d.deletes.tolist() == [live[k][0] is DEL for k in sorted(live)]


def test_update_pairs_in_chunks_match_the_reference() -> None:
    """A chunk's U- / U+ rows passed as `update_pairs` (one Update op where the keys match, a
    Delete and an Insert where they do not) give the same ops as applying them one at a time;
    and a pair whose U- carries the wrong old value is still caught."""
    for seed in range(200):
        rnd = random.Random(seed)
        seq = random_ops(rnd, rnd.randrange(1, 80), rnd.randrange(1, 10), legal=True)
        m = MemTable()
        state: dict[bytes, RefOp] = {}
        i = 0
        while i < len(seq):
            keys: list[bytes] = []
            vals: list[bytes] = []
            ins: list[bool] = []
            pairs: list[int] = []
            for k, (kind, old, new) in seq[i : i + rnd.randrange(1, 8)]:
                if kind is UPD:
                    pairs.append(len(keys))
                    keys += [k, k]
                    vals += [old, new]  # type: ignore[list-item]
                    ins += [False, True]
                else:
                    keys.append(k)
                    vals.append(new if kind is INS else old)  # type: ignore[arg-type]
                    ins.append(kind is INS)
                ref_apply(state, k, (kind, old, new), True)
                i += 1
            if rnd.random() < 0.3 and len(keys) > 1:  # a candidate pair of two different keys
                pairs.append(rnd.randrange(len(keys) - 1))
            m.apply_batch(
                pa.array(keys, pa.binary()),
                pa.array(vals, pa.binary()),
                np.array(ins),
                10,
                update_pairs=np.array(sorted(set(pairs)), np.int64),
            )
            if rnd.random() < 0.3:
                assert m.ops().to_list() == sorted(state.items()), seed
        assert m.ops().to_list() == sorted(state.items()), seed

    m = MemTable()
    k = pa.array([b"\x00\x01"], pa.binary())
    m.apply_batch(k, pa.array([b"a"], pa.binary()), np.array([True]), 1)
    m.apply_batch(
        pa.array([b"\x00\x01"] * 2, pa.binary()),
        pa.array([b"x", b"b"], pa.binary()),
        np.array([False, True]),
        2,
        update_pairs=np.array([0]),
    )
    with pytest.raises(StateConsistencyError, match="old value differs"):
        len(m)


def test_chunk_errors_surface_on_the_next_read() -> None:
    m = MemTable()
    m.apply_batch(pa.array([b"\x00\x01"], pa.binary()), pa.array([b"a"], pa.binary()), np.array([True]), 1)
    m.apply_batch(pa.array([b"\x00\x01"], pa.binary()), pa.array([b"b"], pa.binary()), np.array([True]), 1)
    with pytest.raises(StateConsistencyError, match="double insert"):
        len(m)


# ---------------------------------------------------------------------------------------------
# StateTable + LSM against a dict
# ---------------------------------------------------------------------------------------------

DESC_T = TableDesc(
    7,
    (ColumnDesc("k", BIGINT), ColumnDesc("s", VARCHAR), ColumnDesc("v", BIGINT)),
    pk=(0, 1),
    pk_orders=(ASC, DESC),
    dist_key=(0,),
    read_prefix_len_hint=1,
    name="model",
)


def _chunk(rows: list[tuple[int, str, int]], inserts: list[bool]) -> StreamChunk:
    ops = np.where(np.array(inserts), 1, 2).astype(np.int8)
    return StreamChunk(
        ops,
        [
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([r[1] for r in rows], pa.string()),
            pa.array([r[2] for r in rows], pa.int64()),
        ],
    )


Model = dict[tuple[int, str], tuple[int, str, int]]


def _random_env(rnd: random.Random) -> tuple[TableEnv, StateTable]:
    """A deployment with random block / SST sizes and a table with a random spill threshold."""
    env = TableEnv(
        compaction=CompactionConfig(),
        options=StorageOptions(
            block_size=rnd.choice([200, 700, 4096]), sstable_size=rnd.choice([2000, 50_000])
        ),
    )
    return env, env.state_table(DESC_T, spill_threshold=rnd.choice([300, 5000, 1 << 30]))


def _mutate(
    rnd: random.Random, r: float, env: TableEnv, t: StateTable, model: Model, universe: list, max_chunk: int
) -> bool:
    """One random write step by `r` (< 0.75): a chunk of deletes of present rows and inserts of
    absent ones, a single-row update, a barrier (maybe a checkpoint) or a compaction, applied to
    the table and the model alike. False: `r` asks for a read step instead."""
    if r < 0.45:
        rows, ins = [], []
        for pk in rnd.sample(universe, rnd.randrange(1, max_chunk)):
            if pk in model:
                rows.append(model.pop(pk))
                ins.append(False)
            else:
                row = (pk[0], pk[1], rnd.randrange(1000))
                model[pk] = row
                rows.append(row)
                ins.append(True)
        t.write_chunk(_chunk(rows, ins))
    elif r < 0.55 and model:
        pk = rnd.choice(list(model))
        new = (pk[0], pk[1], rnd.randrange(1000))
        t.update_row(model[pk], new)
        model[pk] = new
    elif r < 0.7:
        env.barrier(t, checkpoint=rnd.random() < 0.7)
    elif r < 0.75:
        env.compact()
    else:
        return False
    return True


@pytest.mark.parametrize("seed", range(16))
def test_state_table_batched_gets_match_a_dict_model(seed: int) -> None:
    rnd = random.Random(seed)
    env, t = _random_env(rnd)
    model: dict[tuple[int, str], tuple[int, str, int]] = {}
    universe = [(k, s) for k in range(-20, 40, 3) for s in ("", "a", "a\x00", "bb", "zz" * 6)]
    for step in range(120):
        r = rnd.random()
        if not _mutate(rnd, r, env, t, model, universe, 12):
            pks = [rnd.choice(universe) for _ in range(rnd.randrange(1, 25))]
            found, chunk = t.get_rows(
                [pa.array([p[0] for p in pks], pa.int64()), pa.array([p[1] for p in pks], pa.string())]
            )
            assert found.tolist() == [p in model for p in pks], f"step {step}"
            got = chunk.to_rows(DESC_T.types)
            for p, row in zip(pks, got, strict=True):
                assert row == model.get(p, (None, None, None)), f"step {step} {p}"
    # the storage layer alone: batched and scalar gets agree at every committed epoch
    reader = env.reader()
    batches = list(reader.iter(b"\x00\x00\x00\x07", b"\x00\x00\x00\x08", apply_watermarks=False))
    keys = [k for b in batches for k in b.user_keys().to_pylist()]
    extra = [k[:-1] + bytes([k[-1] ^ 1]) for k in keys[:20]]  # near misses
    for e in env.committed[-4:]:
        probe = keys + extra + keys[:5]
        rnd.shuffle(probe)
        found, vals = reader.multi_get_columns(pa.array(probe, pa.binary()), e)
        want = [reader.get(k, e) for k in probe]
        assert found.tolist() == [w is not None for w in want]
        assert [v if f else None for v, f in zip(vals.to_pylist(), found.tolist(), strict=True)] == want


def _model_rows_for(model: dict[tuple[int, str], tuple[int, str, int]], prefix: tuple) -> list[tuple]:
    """The model's rows under a pk prefix, in pk order (k ascending, s descending)."""
    rows = [r for pk, r in model.items() if pk[: len(prefix)] == prefix]
    return sorted(rows, key=lambda r: (r[0], [-ord(c) for c in r[1]] + [1]))


@pytest.mark.parametrize("seed", range(16))
def test_state_table_batched_prefix_scans_match_a_dict_model(seed: int) -> None:
    """`scan_prefix_columns` / `scan_prefixes` (one batched storage call for many prefixes) against
    a dict, after random writes, deletes (tombstones over older versions), spills, barriers with
    and without checkpoints, and compactions; and the raw `HummockStorage.read_ranges` against
    one `iter` per range at older committed epochs. Prefixes: absent, repeated, ending in 0xff
    bytes (k = -1), whole pks, and (for `scan_prefixes`) prefixes nested in each other."""
    rnd = random.Random(1000 + seed)
    env, t = _random_env(rnd)
    model: dict[tuple[int, str], tuple[int, str, int]] = {}
    ks = [-1, *range(-20, 40, 3)]
    universe = [(k, s) for k in ks for s in ("", "a", "a\x00", "bb", "\xff", "zz" * 6)]
    for step in range(120):
        r = rnd.random()
        if _mutate(rnd, r, env, t, model, universe, 16):
            continue
        if r < 0.88:  # one-column prefixes (the filter key): the join's probe
            keys = [rnd.choice([*ks, 100, -100]) for _ in range(rnd.randrange(1, 20))]
            chunk, counts = t.scan_prefix_columns([pa.array(keys, pa.int64())])
            want = [_model_rows_for(model, (k,)) for k in keys]
            assert counts.tolist() == [len(w) for w in want], f"step {step}"
            assert chunk.to_rows(DESC_T.types) == [row for w in want for row in w], f"step {step}"
        else:  # whole pks and nested prefixes of mixed lengths
            prefixes: list[tuple] = []
            for _ in range(rnd.randrange(1, 12)):
                pk = rnd.choice(universe)
                prefixes.append(pk if rnd.random() < 0.6 else pk[:1])
            chunk, counts = t.scan_prefixes(prefixes)
            want = [_model_rows_for(model, p) for p in prefixes]
            assert counts.tolist() == [len(w) for w in want], f"step {step} {prefixes}"
            assert chunk.to_rows(DESC_T.types) == [row for w in want for row in w], f"step {step}"
    # the storage layer alone: one batched read of many ranges equals one iterator per range, at
    # committed epochs old and new (older versions and tombstones still in the runs)
    reader = env.reader()
    table = b"\x00\x00\x00\x07"
    all_keys = sorted(
        {
            k
            for b in reader.iter(table, b"\x00\x00\x00\x08", apply_watermarks=False)
            for k in b.user_keys().to_pylist()
        }
    )
    for e in env.committed[-4:]:
        cuts = sorted(set([*rnd.sample(all_keys, min(len(all_keys), 12)), table, b"\x00\x00\x00\x08"]))
        ranges = [(a, b) for a, b in zip(cuts[0::2], cuts[1::2], strict=False)]
        if rnd.random() < 0.5 and ranges:
            ranges[-1] = (ranges[-1][0], None)  # unbounded last range
        got = reader.read_ranges(ranges, e)
        want_pairs = [
            p for a, b in ranges for bt in reader.iter(a, b, e, apply_watermarks=False) for p in bt.to_pairs()
        ]
        got_pairs = [(k[:-8], v) for k, v in got.to_pairs()]
        assert got_pairs == [(k[:-8], v) for k, v in want_pairs], f"epoch {e}"
