"""GroupStateCache against a dict model: what it answers is always the last row put for a key."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from piestream.common.order import ASC
from piestream.common.types import BIGINT, VARCHAR
from piestream.stream.executors.agg.cache import GroupStateCache

# one barrier's writes: (group key, alive, state value)
Barrier = list[tuple[str | None, bool, int]]
keys = st.sampled_from([None, "a", "b", "c", "d", "e", "f"])
barriers = st.lists(st.lists(st.tuples(keys, st.booleans(), st.integers(-5, 5))), max_size=12)


@settings(max_examples=150, deadline=None)
@given(barriers, st.integers(1, 8))
def test_cache_answers_the_last_row_put_or_nothing(writes: list[Barrier], capacity: int) -> None:
    cache = GroupStateCache([VARCHAR], [ASC], [VARCHAR, BIGINT], capacity)
    model: dict[str | None, int] = {}
    for batch in writes:
        latest = {k: (alive, v) for k, alive, v in batch}  # a barrier writes each group once
        keys_py = list(latest)
        if not keys_py:
            continue
        key_col = pa.array(keys_py, pa.string())
        keys = cache.encode([key_col])
        alive = np.array([latest[k][0] for k in keys_py])
        vals = pa.array([latest[k][1] for k in keys_py], pa.int64())
        cache.put(keys, alive, [key_col, vals])
        for k in keys_py:
            if latest[k][0]:
                model[k] = latest[k][1]
            else:
                model.pop(k, None)
        assert len(cache) <= capacity
        probe = pa.array([*sorted(model, key=str), "zz"], pa.string())
        pos = cache.lookup(cache.encode([probe]))
        assert pos[-1] == -1  # never put
        held = np.flatnonzero(pos >= 0)
        rows = cache.rows(pos[held])
        for j, i in enumerate(held.tolist()):
            k = probe[i].as_py()
            assert rows[0][j].as_py() == k
            assert rows[1][j].as_py() == model[k]
        if capacity >= 8:  # room for every key: nothing is evicted
            assert len(held) == len(model)


def test_eviction_keeps_the_most_recently_written() -> None:
    cache = GroupStateCache([BIGINT], [ASC], [BIGINT, BIGINT], capacity=4)
    for start in range(0, 10, 2):
        col = pa.array([start, start + 1], pa.int64())
        cache.put(cache.encode([col]), np.ones(2, np.bool_), [col, col])
    pos = cache.lookup(cache.encode([pa.array(range(10), pa.int64())]))
    assert (pos[-2:] >= 0).all()  # the last barrier's groups survive eviction
    assert (pos[:4] == -1).all()  # the first ones are gone
    assert cache.hits + cache.misses == 10
