"""Randomized differential tests of HashAgg / SimpleAgg against a from-scratch Python model.

Each seed drives epochs of random inserts, deletes and updates (U- / U+, possibly moving a row
to another group) over a small key space. After every barrier the emitted changes, applied to a
multiset, must equal the aggregate of the current input computed from scratch with PostgreSQL
semantics, and the output must keep the stream-key invariant.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pytest
from exec_harness import Harness

from pg_numeric import pg_int_avg
from piestream.common.chunk import Op, StreamChunk
from piestream.common.order import ASC, DESC
from piestream.common.scalar import Row
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, BOOLEAN, INT, VARCHAR
from piestream.expr.expr import FuncCall, InputRef, Literal
from piestream.plan.agg_call import AggCall
from piestream.plan.hash_agg import HashAggNode, hash_agg_node
from piestream.plan.node import ExchangeNode
from piestream.storage.table.state_table import StateTable
from piestream.stream.executor import StreamingConfig

# k (group), v (value), s (string), b (bool), id (stream key)
SCHEMA = Schema.from_types([INT, INT, VARCHAR, BOOLEAN, BIGINT])
TYPES = SCHEMA.types
K, V, S, B, ID = range(5)
V_POSITIVE = FuncCall("greater_than", (InputRef(V, INT), Literal(0, INT)), BOOLEAN)
S_NOT_A = FuncCall("not_equal", (InputRef(S, VARCHAR), Literal("a", VARCHAR)), BOOLEAN)


def _avg(values: list[int]) -> Decimal:
    return pg_int_avg(sum(values), len(values))


def _desc_nulls_first(row: Row) -> tuple[int, int, int]:
    v = row[V]
    return (0 if v is None else 1, 0 if v is None else -v, row[ID])


def _non_null(rows: list[Row], col: int) -> list[object]:
    return [r[col] for r in rows if r[col] is not None]


def _or_null(f: Callable[[list[Any]], object]) -> Callable[[list[Row], int], object]:
    """An aggregate over the non-NULL values of a column, NULL when there are none."""
    return lambda rows, col: f(vals) if (vals := _non_null(rows, col)) else None


Model = Callable[[list[Row], int], object]

# (call, FILTER as a Python predicate, the aggregate over the filtered rows and the call's column)
CASES: list[tuple[AggCall, Callable[[Row], bool] | None, Model]] = [
    (AggCall.create("count_star", [], TYPES), None, lambda rows, _: len(rows)),
    (AggCall.create("count", [V], TYPES), None, lambda rows, c: len(_non_null(rows, c))),
    (AggCall.create("sum", [V], TYPES), None, _or_null(sum)),
    (AggCall.create("avg", [V], TYPES), None, _or_null(_avg)),
    (AggCall.create("min", [V], TYPES), None, _or_null(min)),
    (AggCall.create("max", [V], TYPES), None, _or_null(max)),
    (AggCall.create("count", [V], TYPES, distinct=True), None, lambda rows, c: len(set(_non_null(rows, c)))),
    (
        AggCall.create("sum", [V], TYPES, distinct=True, filter=V_POSITIVE),
        lambda r: r[V] is not None and r[V] > 0,
        _or_null(lambda vals: sum(set(vals))),
    ),
    (AggCall.create("avg", [V], TYPES, distinct=True), None, _or_null(lambda vals: _avg(sorted(set(vals))))),
    (
        AggCall.create("min", [V], TYPES, filter=S_NOT_A),
        lambda r: r[S] is not None and r[S] != "a",
        _or_null(min),
    ),
    (AggCall.create("max", [S], TYPES), None, _or_null(max)),
    (
        AggCall.create("string_agg", [S], TYPES, delimiter=",", order_by=[(S, ASC)]),
        None,
        lambda rows, c: ",".join(sorted(r[S] for r in rows if r[S] is not None)) or None,
    ),
    (
        AggCall.create("array_agg", [V], TYPES, order_by=[(V, DESC)]),
        None,
        lambda rows, c: tuple(r[V] for r in sorted(rows, key=_desc_nulls_first)) if rows else None,
    ),
    (AggCall.create("bool_or", [B], TYPES), None, _or_null(any)),
    (
        AggCall.create("bool_and", [B], TYPES, filter=V_POSITIVE),
        lambda r: r[V] is not None and r[V] > 0,
        _or_null(all),
    ),
    (
        AggCall.create("count_star", [], TYPES, filter=S_NOT_A),
        lambda r: r[S] is not None and r[S] != "a",
        lambda rows, _: len(rows),
    ),
]
CALLS = tuple(c for c, _, _ in CASES)


def _node(group_key: Sequence[int], append_only: bool = False) -> HashAggNode:
    src = ExchangeNode(schema=SCHEMA, stream_key=(ID,), append_only=append_only, upstream_fragment_id=1)
    ids = itertools.count(100)
    return hash_agg_node(src, group_key, CALLS, lambda: next(ids))


def model(live: dict[int, Row], group_key: Sequence[int]) -> dict[Row, int]:
    """The aggregate of the current input, computed from scratch (PostgreSQL semantics)."""
    groups: dict[Row, list[Row]] = {}
    for row in live.values():
        groups.setdefault(tuple(row[i] for i in group_key), []).append(row)
    if not group_key and not groups:
        groups[()] = []  # SimpleAgg: one row even over no input
    out = {}
    for g, rows in groups.items():
        values = []
        for call, keep, f in CASES:
            values.append(f([r for r in rows if keep is None or keep(r)], call.args[0] if call.args else -1))
        out[(*g, *values)] = 1
    return out


# -- driving ------------------------------------------------------------------------------------


def _hashable(row: Row) -> Row:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)


class StreamKeyChecker:
    """Per output stream key: inserts and deletes alternate, a delete carries the current row."""

    def __init__(self, key_len: int) -> None:
        self.key_len = key_len
        self.current: dict[Row, Row] = {}
        self.multiset: dict[Row, int] = {}

    def apply(self, chunks: Sequence[StreamChunk]) -> None:
        for c in chunks:
            for op, row in c.to_records():
                row = _hashable(row)
                key = row[: self.key_len]
                if op.is_insert:
                    assert key not in self.current, f"{op!r} of existing key {key}: {row}"
                    self.current[key] = row
                else:
                    assert self.current.get(key) == row, (
                        f"{op!r} {row} but the key holds {self.current.get(key)}"
                    )
                    del self.current[key]
                self.multiset[row] = self.multiset.get(row, 0) + (1 if op.is_insert else -1)
                if not self.multiset[row]:
                    del self.multiset[row]
        assert sorted(self.current.values(), key=repr) == sorted(self.multiset, key=repr)


def _random_row(rng: random.Random, row_id: int) -> Row:
    def maybe(v: object) -> object:
        return None if rng.random() < 0.15 else v

    return (
        maybe(rng.randrange(4)),
        maybe(rng.randrange(-5, 6)),
        maybe(rng.choice("abcd")),
        maybe(rng.random() < 0.5),
        row_id,
    )


def _random_epoch(
    rng: random.Random, live: dict[int, Row], next_id: itertools.count[int], append_only: bool
) -> list[StreamChunk]:
    """Chunks of random changes to `live` (updated in place)."""
    chunks = []
    for _ in range(rng.randrange(1, 4)):
        recs: list[tuple[Op, Row]] = []
        for _ in range(rng.randrange(1, 12)):
            r = rng.random()
            if append_only or r < 0.5 or not live:
                row = _random_row(rng, next(next_id))
                live[row[ID]] = row
                recs.append((Op.INSERT, row))
            elif r < 0.75:
                rid = rng.choice(sorted(live))
                recs.append((Op.DELETE, live.pop(rid)))
            else:
                rid = rng.choice(sorted(live))
                new = _random_row(rng, rid)
                recs += [(Op.UPDATE_DELETE, live[rid]), (Op.UPDATE_INSERT, new)]
                live[rid] = new
        chunks.append(StreamChunk.from_rows(recs, TYPES))
    return chunks


runs: list[Harness] = []  # the harness of each run, for checks of its counters


def run(
    seed: int,
    group_key: Sequence[int],
    epochs: int,
    *,
    append_only: bool = False,
    rebuild: bool = True,
    harness: Callable[[HashAggNode], Harness] | None = None,
) -> list[list[tuple[Op, Row]]]:
    """Drive one random run, checking the output after every barrier; returns all output records."""
    rng = random.Random(seed)
    node = _node(group_key, append_only)
    h = harness(node) if harness else Harness(node, rebuild_each_epoch=rebuild)
    runs.append(h)
    live: dict[int, Row] = {}
    ids = itertools.count(1)
    checker = StreamKeyChecker(len(group_key))
    everything = []
    for _ in range(epochs):
        out = []
        for chunk in _random_epoch(rng, live, ids, append_only):
            out += h.push(chunk)
        assert out == [], "aggregation emits only on barriers"
        out = h.barrier()
        checker.apply(out)
        everything += [c.to_records() for c in out]
        assert checker.multiset == {_hashable(r): n for r, n in model(live, group_key).items()}
    return everything


@pytest.mark.parametrize("seed", range(8))
def test_hash_agg_matches_model(seed: int) -> None:
    run(seed, [K], epochs=10)


@pytest.mark.parametrize("seed", range(3))
def test_hash_agg_two_column_key_matches_model(seed: int) -> None:
    run(100 + seed, [K, B], epochs=8)


@pytest.mark.parametrize("seed", range(3))
def test_simple_agg_matches_model(seed: int) -> None:
    run(200 + seed, [], epochs=10)


@pytest.mark.parametrize("seed", range(3))
def test_append_only_input_matches_model(seed: int) -> None:
    run(300 + seed, [K], epochs=8, append_only=True)


def test_rebuilding_each_epoch_changes_nothing() -> None:
    """Executors rebuilt from storage every epoch emit exactly what a long-lived one emits."""
    for seed, key in ((400, [K]), (401, [])):
        assert run(seed, key, epochs=6, rebuild=False) == run(seed, key, epochs=6, rebuild=True)


@pytest.mark.parametrize("budget", [3000, 1 << 30])
def test_warm_group_cache_changes_nothing(budget: int) -> None:
    """Previous states answered from the worker's group cache (also when a tiny memory budget
    evicts entries in the middle of the epoch) give exactly the output of reading them all from
    storage."""
    config = StreamingConfig(check_consistency=True, sanity_check_storage=True, cache_budget_bytes=budget)
    for seed in (500, 501):
        cold = run(seed, [K], epochs=12)
        warm = run(seed, [K], epochs=12, harness=lambda n: Harness(n, warm_cache=True, config=config))
        assert warm == cold
        hits, misses = runs[-1].cache.take_counts()
        assert misses > 0, (hits, misses)
        if budget >= 1 << 30:  # groups are read from storage only the first time they are seen
            assert hits > misses, (hits, misses)
        else:
            assert runs[-1].cache.registry.evictions > 0


def test_complete_group_cache_reads_no_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group cache that has seen its table since it was empty holds every group: its misses are
    new groups, answered without reading the value table, with exactly the output of reading it."""
    value_table = _node([K]).state_tables.value.table_id
    reads: list[int] = []
    get_rows = StateTable.get_rows

    def counted(self: StateTable, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.desc.table_id)
        return get_rows(self, *args, **kwargs)

    monkeypatch.setattr(StateTable, "get_rows", counted)
    config = StreamingConfig(check_consistency=True, sanity_check_storage=True, cache_budget_bytes=1 << 30)
    cold = run(510, [K], epochs=12)
    assert value_table in reads, "a cold run reads every dirty group from storage"
    reads.clear()
    warm = run(510, [K], epochs=12, harness=lambda n: Harness(n, warm_cache=True, config=config))
    assert warm == cold
    assert value_table not in reads
    caches = list(runs[-1].cache.keyed_rows())
    assert caches and all(c.complete for c in caches)
