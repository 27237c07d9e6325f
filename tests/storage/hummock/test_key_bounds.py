"""Range bounds of ``HummockStorage.iter`` and the keys piestream stores.

Full keys are ``user key | inverted epoch`` compared as bytes, so a bound that *extends* a
stored user key K (``K + b"\\0"``) lands among K's versions: K is returned from such a start and
dropped before such an end. That is exact and documented: every stored user key is
``table id | vnode | memcomparable(pk)``, and memcomparable rows of one schema are prefix-free,
so no bound a caller builds (pk prefixes, ``byte_range``'s inclusive / exclusive bounds via
``next_key``) extends a stored key — the property test below checks exactly that against a model,
over SSTs and the shared buffer, with variable-length and DESC pk columns. "The key after K" is
``next_key(K)``.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piestream.common.order import ASC, DESC, OrderType
from piestream.common.types import BIGINT, VARCHAR, DataType
from piestream.encoding.keys import full_key, next_key, user_key
from piestream.encoding.memcmp_scalar import encode_row
from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, StorageOptions, visible_pairs
from piestream.storage.hummock.version import HummockVersion
from piestream.storage.object_store import InMemoryObjectStore
from piestream.storage.table.key_range import Bound, byte_range

OPTIONS = StorageOptions(block_size=300, sstable_size=1000, bloom_bits_per_key=10)
E1, E2 = 100 << 16, 101 << 16


def _storage(writes: list[tuple[int, dict[bytes, bytes | None]]], synced: int) -> HummockStorage:
    """Storage holding `writes` (epoch, key -> value or None = delete); the first `synced`
    epochs are in SSTs, the rest in the shared buffer."""
    hs = HummockStorage(SstableStore(InMemoryObjectStore()), HummockVersion(id=0), OPTIONS)
    for i, (epoch, kv) in enumerate(writes):
        pairs = sorted((full_key(k, epoch), TOMBSTONE if v is None else put_value(v)) for k, v in kv.items())
        hs.write_batch(KvBatch.from_pairs(pairs), epoch)
        if i < synced:
            hs.sync(epoch)
    return hs


def _keys(hs: HummockStorage, start: bytes | None, end: bytes | None) -> list[bytes]:
    return [k for k, _ in visible_pairs(hs.iter(start, end))]


def test_a_bound_extending_a_stored_key_is_among_its_versions() -> None:
    """The exact behaviour the chunked backfill works around (K + b"\\0" is not "after K")."""
    keys = [user_key(1, 0, bytes([i]) * 3) for i in (1, 2, 3)]
    for synced in (0, 1):  # shared buffer and SST
        hs = _storage([(E1, dict.fromkeys(keys, b"v"))], synced)
        k = keys[1]
        assert _keys(hs, k + b"\0", None) == keys[1:]  # K again, as the note says
        assert _keys(hs, None, k + b"\0") == keys[:1]  # and K is not before K + b"\0"
        # next_key is the exclusive successor; a prefix of the stored keys bounds them all
        assert _keys(hs, next_key(k), None) == keys[2:]
        assert _keys(hs, None, next_key(k)) == keys[:2]
        assert _keys(hs, k[:7], next_key(k[:7])) == [k]


# -- property: bounds callers build never extend a stored key -------------------------------------

PK_TYPES: list[DataType] = [VARCHAR, BIGINT, VARCHAR]
text = st.one_of(st.none(), st.text(alphabet="ab\0\xff", max_size=10))
rows = st.tuples(text, st.one_of(st.none(), st.integers(-3, 3)), text)


def _enc(orders: list[OrderType], first: int) -> object:
    return lambda values: encode_row(
        list(values), PK_TYPES[first : first + len(values)], orders[first : first + len(values)]
    )


@st.composite
def bounds(draw: st.DrawFn, sample: list[tuple[Any, ...]]) -> tuple[int, tuple[Any, ...], tuple[Any, ...]]:
    """A pk prefix length, prefix values and a (lo, hi) sub-range on the next pk column(s)."""
    n_prefix = draw(st.integers(0, 2))
    base = draw(st.sampled_from(sample)) if sample else (None, None, None)
    prefix = tuple(base[:n_prefix])

    def bound() -> Bound | None:
        if draw(st.booleans()):
            return None
        width = draw(st.integers(1, len(PK_TYPES) - n_prefix))
        vals = draw(st.sampled_from(sample))[n_prefix : n_prefix + width] if sample else (None,) * width
        return Bound(tuple(vals), draw(st.booleans()))

    return n_prefix, prefix, (bound(), bound())


def _model_key(enc_row: bytes) -> bytes:
    return user_key(7, 3, enc_row)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=st.lists(rows, min_size=1, max_size=40, unique=True),
    second=st.lists(st.tuples(rows, st.booleans()), max_size=20),
    orders=st.lists(st.sampled_from([ASC, DESC]), min_size=3, max_size=3),
    synced=st.integers(0, 2),
    data=st.data(),
)
def test_ranges_callers_build_are_exact_user_key_ranges(
    first: list[tuple[Any, ...]],
    second: list[tuple[tuple[Any, ...], bool]],
    orders: list[OrderType],
    synced: int,
    data: st.DataObject,
) -> None:
    encode = _enc(orders, 0)
    w1: dict[bytes, bytes | None] = {_model_key(encode(r)): repr(r).encode() for r in first}  # type: ignore[operator]
    w2 = {_model_key(encode(r)): (None if delete else b"2" + repr(r).encode()) for r, delete in second}  # type: ignore[operator]
    stored = sorted(set(w1) | set(w2))
    # the invariant everything rests on: no stored user key extends another
    assert not any(b.startswith(a) for a, b in itertools.pairwise(stored))
    model = {**w1, **w2}
    live = sorted(k for k, v in model.items() if v is not None)
    hs = _storage([(E1, w1), (E2, w2)], synced)
    sample = [*first, *(r for r, _ in second)]
    for _ in range(8):
        n_prefix, prefix, sub_range = data.draw(bounds(sample))
        prefix_key = user_key(7, 3, encode(prefix) if prefix else b"")  # type: ignore[operator]
        start, end = byte_range(prefix_key, sub_range, _enc(orders, n_prefix))
        want = [k for k in live if k >= start and (end is None or k < end)]
        assert _keys(hs, start, end) == want, (prefix, sub_range)
        # each bound is a stored key or extends none (so no version of a key straddles it)
        for b in (start, end):
            assert b is None or not any(b != k and b.startswith(k) for k in stored)
