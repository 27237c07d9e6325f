"""Materialize's conflict check through its write-through cache: a cache made over an empty
table is complete (a miss is a key not stored, so no state read); wherever the table may hold
rows the cache does not, the check must still find them. Each case upserts keys that exist in
one place only (committed SSTs, the cache, this epoch's writes) and checks the U-/U+ output and
the table (the harness also checks every write against storage)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from exec_harness import Harness, pretty_records, records

from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import INT
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.plan.node import ExchangeNode
from piestream.storage.table.schemas import mv_table
from piestream.storage.table.state_table import StateTable
from piestream.stream.cache.keyed_rows import KeyedRows
from piestream.stream.executor import StreamingConfig

S2 = Schema.from_types([INT, INT])
SRC = ExchangeNode(schema=S2, stream_key=(0,), upstream_fragment_id=1)


def _node(conflict: ConflictBehavior = ConflictBehavior.OVERWRITE) -> MaterializeNode:
    table = mv_table(7, [("k", INT), ("v", INT)], pk=[0], pk_orders=[ASC])
    return MaterializeNode(schema=S2, stream_key=(0,), input=SRC, table=table, conflict=conflict)


def _cache(h: Harness) -> KeyedRows:
    caches = list(h.cache.keyed_rows())
    assert len(caches) == 1
    return caches[0]


class _StateReads:
    """Counts `StateTable.get_rows` calls (the conflict check's state reads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        orig = StateTable.get_rows

        def counting(st: StateTable, *a: Any, **kw: Any) -> Any:
            self.calls += 1
            return orig(st, *a, **kw)

        monkeypatch.setattr(StateTable, "get_rows", counting)


def test_new_table_cache_is_complete_and_skips_state_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _StateReads(monkeypatch)
    node = _node()
    h = Harness(node, warm_cache=True)
    out = h.push(" i i\n + 1 10\n + 2 20")
    assert records(out) == pretty_records(" i i\n + 1 10\n + 2 20")
    assert _cache(h).complete is True
    # the same epoch: the keys are only in this epoch's writes (and the cache)
    out = h.push(" i i\n + 1 11\n + 3 30")
    assert records(out) == pretty_records(" i i\n U- 1 10\n U+ 1 11\n + 3 30")
    h.barrier()
    # the next epoch, warm: the keys are in committed SSTs and the cache
    out = h.push(" i i\n + 2 21\n - 3 999\n + 4 40")
    assert records(out) == pretty_records(" i i\n U- 2 20\n U+ 2 21\n - 3 30\n + 4 40")
    h.barrier()
    assert reads.calls == 0, "a complete cache answers the conflict check alone"
    assert h.table_rows(node.table) == [(1, 11), (2, 21), (4, 40)]


@pytest.mark.parametrize(
    "conflict",
    [ConflictBehavior.OVERWRITE, ConflictBehavior.IGNORE_CONFLICT, ConflictBehavior.DO_UPDATE_IF_NOT_NULL],
)
def test_cold_cache_over_stored_rows_is_not_complete(conflict: ConflictBehavior) -> None:
    """Keys only in committed SSTs: a new actor's empty cache must not claim completeness."""
    node = _node(conflict)
    h = Harness(node, warm_cache=False)  # every epoch's actor starts with empty caches
    h.push(" i i\n + 1 10\n + 2 20")
    h.barrier()
    out = h.push(" i i\n + 1 11\n + 3 30")
    if conflict is ConflictBehavior.IGNORE_CONFLICT:
        want = " i i\n + 3 30"
    else:
        want = " i i\n U- 1 10\n U+ 1 11\n + 3 30"
    assert records(out) == pretty_records(want)
    out = h.push(" i i\n - 2 999")
    assert records(out) == pretty_records(" i i\n - 2 20")
    h.barrier()
    first = 10 if conflict is ConflictBehavior.IGNORE_CONFLICT else 11
    assert h.table_rows(node.table) == [(1, first), (3, 30)]


def test_evicted_cache_reads_state_again() -> None:
    """Keys evicted from a complete cache (only in SSTs now): it is complete no more."""
    node = _node()
    h = Harness(node, warm_cache=True, config=StreamingConfig(check_consistency=True, cache_budget_bytes=1))
    h.push(" i i\n + 1 10\n + 2 20")
    assert not _cache(h).complete  # the tiny budget dropped what was written
    h.barrier()
    out = h.push(" i i\n + 1 11\n - 2 999")
    assert records(out) == pretty_records(" i i\n U- 1 10\n U+ 1 11\n - 2 20")
    h.barrier()
    assert h.table_rows(node.table) == [(1, 11)]


def test_eviction_mid_epoch_reads_state_for_the_evicted_keys() -> None:
    """A complete cache loses entries in the middle of an epoch (the LRU): the keys it no longer
    holds are only in this epoch's writes, and the check must find them there."""
    node = _node()
    h = Harness(node, warm_cache=True)
    h.push(" i i\n + 1 10\n + 2 20")
    cache = _cache(h)
    assert cache.complete is True
    cache.evict_before(cache.clock() + 1)  # every entry
    assert cache.complete is False and len(cache) == 0
    out = h.push(" i i\n + 1 11\n + 2 21")
    assert records(out) == pretty_records(" i i\n U- 1 10\n U+ 1 11\n U- 2 20\n U+ 2 21")
    h.barrier()
    assert h.table_rows(node.table) == [(1, 11), (2, 21)]


def test_distinct_check_by_hashes_falls_back_to_the_bytes_on_equal_hashes() -> None:
    """Distinct hashes prove distinct keys; equal hashes (a collision, made up here) do not
    prove equal keys, so the bytes decide."""
    from piestream.encoding.ragged import Ragged
    from piestream.stream.executors.materialize import _distinct

    keys = Ragged.from_list([b"a", b"b", b"c"])
    assert _distinct(keys, np.array([7, 8, 9], np.uint64))
    assert _distinct(keys, np.array([7, 7, 9], np.uint64)), "a collision of distinct keys"
    same = Ragged.from_list([b"a", b"b", b"a"])
    assert not _distinct(same, KeyedRows.hashes(same))
    assert not _distinct(same)
