"""The source executor: budgets from rate × epoch span, offsets committed with the epoch, the
same output for a retried epoch, split ownership, bad records rejected or dead-lettered."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
from source_harness import EpochHarness

from piestream.common.chunk import NEW_KEYS_METADATA
from piestream.common.epoch import EpochPair
from piestream.common.order import ASC
from piestream.common.schema import Schema
from piestream.common.types import BIGINT, VARCHAR, Field
from piestream.plan.materialize import ConflictBehavior, MaterializeNode
from piestream.plan.source import SourceLimits, SourceNode, SourceSpec, dead_letter_table, source_state_table
from piestream.storage.table.desc import ColumnDesc, TableDesc
from piestream.stream.connector import BadRecord, ReadResult, register_source_connector
from piestream.stream.executor import StreamingConfig
from piestream.stream.executors.source import SourceError, owned_splits


@dataclass(frozen=True)
class Counter:
    """Split s yields s*1000 + 0, 1, 2, ...; every 7th value of split 0 is a bad record."""

    n_splits: int = 2
    bad_every: int = 0

    def splits(self) -> list[str]:
        return [str(i) for i in range(self.n_splits)]

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        start = int(offset or 0)
        vals = list(range(start, start + budget))
        bad = [
            BadRecord("f.txt", v + 1, str(v), "bad")
            for v in vals
            if self.bad_every and v % self.bad_every == 6
        ]
        good = [int(split) * 1000 + v for v in vals if not (self.bad_every and v % self.bad_every == 6)]
        batch = pa.RecordBatch.from_arrays([pa.array(good, pa.int64())], names=["v"])
        return ReadResult([batch], str(start + budget), budget, bad)


def counter_connector(spec: SourceSpec) -> tuple[Counter, SourceLimits]:
    """The test connector: the executor builds its reader from the node's spec, as for any other."""
    return Counter(int(spec.options["splits"]), int(spec.options["bad_every"])), SourceLimits()


register_source_connector("counter", counter_connector)


def _node(reader: Counter, limits: SourceLimits, dead: bool = False) -> SourceNode:
    options = {"splits": str(reader.n_splits), "bad_every": str(reader.bad_every)}
    return SourceNode(
        schema=Schema((Field("v", BIGINT),)),
        stream_key=(0,),
        append_only=True,
        spec=SourceSpec("s", "counter", (("v", BIGINT),), options),
        limits=limits,
        state_table=source_state_table(7),
        split_ids=tuple(reader.splits()),
        dead_letter=dead_letter_table(8, "s_dead_letter") if dead else None,
    )


def _values(chunks) -> list[int]:  # type: ignore[no-untyped-def]
    return [v for c in chunks for v in c.columns[0].to_pylist()]


def test_budget_is_rate_times_epoch_span_with_fractional_credit() -> None:
    h = EpochHarness(_node(Counter(1), SourceLimits(rate_limit=15.0, max_rows_per_epoch=1000)))
    sizes = [len(_values(h.run(span_ms=100))) for _ in range(10)]  # 1.5 rows per epoch
    assert sizes == [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]
    assert len(_values(h.run(span_ms=10_000))) == 150
    capped = EpochHarness(_node(Counter(2), SourceLimits(rate_limit=None, max_rows_per_epoch=10)))
    assert _values(capped.run()) == [0, 1, 2, 3, 4, 1000, 1001, 1002, 1003, 1004]  # cap split evenly


def test_offsets_commit_with_the_epoch_and_a_retry_emits_the_same() -> None:
    h = EpochHarness(_node(Counter(2), SourceLimits(rate_limit=None, max_rows_per_epoch=6)))
    first = _values(h.run())
    retry_a = _values(h.run(commit=False))  # an attempt that never commits
    retry_b = _values(h.run(cache=False))  # the retried attempt, without the worker's cache
    assert retry_a == retry_b == [3, 4, 5, 1003, 1004, 1005]
    assert first == [0, 1, 2, 1000, 1001, 1002]
    state = {k: json.loads(v)["o"] for k, v in h.rows(source_state_table(7))}
    assert state == {"0": "6", "1": "6"}


def test_each_actor_reads_only_its_splits() -> None:
    assert owned_splits(["a", "b", "c", "d", "e"], 1, 2) == ["b", "d"]
    h = EpochHarness(_node(Counter(3), SourceLimits(max_rows_per_epoch=3)), actor_index=1, parallelism=2)
    assert _values(h.run()) == [1000]


def test_bad_records_reject_the_epoch_or_go_to_the_dead_letter_table() -> None:
    h = EpochHarness(_node(Counter(1, bad_every=10), SourceLimits(max_rows_per_epoch=8)))
    with pytest.raises(SourceError, match=r'file "f\.txt", line 7: bad'):
        h.run()
    assert h.committed == 0  # nothing committed, nothing skipped: the same record fails again
    with pytest.raises(SourceError):
        h.run()
    d = EpochHarness(
        _node(
            Counter(1, bad_every=10), SourceLimits(max_rows_per_epoch=8, error_handling="dead_letter"), True
        )
    )
    assert _values(d.run()) == [0, 1, 2, 3, 4, 5, 7]
    assert _values(d.run()) == [8, 9, 10, 11, 12, 13, 14, 15]
    assert _values(d.run()) == [17, 18, 19, 20, 21, 22, 23]
    assert d.rows(dead_letter_table(8, "x")) == [("f.txt", 7, "6", "bad"), ("f.txt", 17, "16", "bad")]


def test_new_splits_come_from_the_epochs_plan_each_read_once_by_its_owner() -> None:
    """Splits made after the job was planned (new Kafka partitions) are the ones the barrier
    manager fixed in the epoch's plan (`StreamingConfig.source_splits`): an attempt and its
    retry read the same, whatever the connector would say now."""
    node = _node(Counter(2), SourceLimits(max_rows_per_epoch=4))
    actors = [EpochHarness(node, actor_index=i, parallelism=2) for i in range(2)]
    seen = [_values(a.run()) for a in actors]
    assert seen == [[0, 1], [1000, 1001]]
    grown = StreamingConfig(sanity_check_storage=True, source_splits=(("s", ("2", "3")),))
    attempt = [_values(a.run(commit=False, config=grown)) for a in actors]  # never commits
    seen = [_values(a.run(cache=False, config=grown)) for a in actors]  # its retry: the same rows
    assert attempt == seen == [[2, 2000], [1002, 3000]]  # each new split read by its owner only
    seen += [_values(a.run(config=grown)) for a in actors]
    assert seen[2:] == [[3, 2001], [1003, 3001]]
    other = StreamingConfig(sanity_check_storage=True, source_splits=(("t", ("9",)),))
    # another source's new splits are not these: two splits again, so two rows each (4 / 2)
    assert [_values(a.run(config=other)) for a in actors] == [[4, 5], [1004, 1005]]
    state = {k: json.loads(v)["o"] for a in actors for k, v in a.rows(source_state_table(7))}
    assert state == {"0": "6", "1": "6", "2": "2", "3": "2"}


@dataclass(frozen=True)
class Truncating:
    """A CDC-like upstream of (id, v) rows: epoch 1 inserts ids 1..5; epoch 2 inserts 6, is
    truncated, then inserts id 1 again; then nothing."""

    def splits(self) -> list[str]:
        return ["t"]

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        def batch(ids: list[int], v: str) -> pa.RecordBatch:
            return pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int64()), pa.array([v] * len(ids))], names=["id", "v"]
            )

        ins = np.int8(1)
        if offset is None:
            return ReadResult([batch([1, 2, 3, 4, 5], "a")], "1", 5, ops=[np.full(5, ins)])
        if offset == "1":
            before, after = batch([6], "b"), batch([1], "c")
            return ReadResult([before, after], "2", 3, ops=[np.full(1, ins)] * 2, truncate_at=[1])
        return ReadResult([], offset, 0)


register_source_connector("truncating", lambda spec: (Truncating(), SourceLimits()))


def test_an_upstream_truncate_deletes_every_row_once_in_a_retried_epoch_too() -> None:
    schema = Schema((Field("id", BIGINT), Field("v", VARCHAR)))
    cols = (("id", BIGINT), ("v", VARCHAR))
    table = TableDesc(
        table_id=20,
        columns=tuple(ColumnDesc(n, t) for n, t in cols),
        pk=(0,),
        pk_orders=(ASC,),
        dist_key=(0,),
        read_prefix_len_hint=1,
        name="t",
    )
    source = SourceNode(
        schema=schema,
        stream_key=(0,),
        append_only=False,
        spec=SourceSpec("t", "truncating", cols, {}, format="debezium"),
        limits=SourceLimits(),
        state_table=source_state_table(21),
        split_ids=("t",),
        truncates=table,
    )
    h = EpochHarness(
        MaterializeNode(
            schema=schema,
            stream_key=(0,),
            append_only=False,
            input=source,
            table=table,
            conflict=ConflictBehavior.OVERWRITE,
        )
    )

    def changes(chunks) -> list[tuple[int, int, str]]:  # type: ignore[no-untyped-def]
        return [(int(op), *row) for c in chunks for op, row in zip(c.ops, c.to_rows(), strict=True)]

    h.run()
    assert sorted(h.rows(table)) == [(i, "a") for i in range(1, 6)]
    attempt = changes(h.run(commit=False))  # an attempt that never commits
    retry = changes(h.run(cache=False))  # its retry, without the worker's cache
    deletes = sorted([(2, i, "a") for i in range(1, 6)] + [(2, 6, "b")])
    for out in (attempt, retry):  # each stored row deleted once (with the stored row), then 1
        assert out[0] == (1, 6, "b") and sorted(out[1:-1]) == deletes and out[-1] == (1, 1, "c")
    assert h.rows(table) == [(1, "c")]
    assert changes(h.run()) == []


@dataclass(frozen=True)
class Hinting(Counter):
    """Counter's batches with the new-keys metadata of a CDC snapshot chunk; `hints_new_keys`
    says whether this reader makes that hint (a file or message reader's metadata must not)."""

    hints: bool = False

    @property
    def hints_new_keys(self) -> bool:
        return self.hints

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        r = super().read(split, offset, budget, epoch)
        marked = [b.replace_schema_metadata({NEW_KEYS_METADATA: b"1"}) for b in r.batches]
        return dataclasses.replace(r, batches=marked)


def test_the_new_keys_hint_is_taken_only_from_readers_that_make_it() -> None:
    for hints in (True, False):
        register_source_connector("hinting", lambda spec, h=hints: (Hinting(1, hints=h), SourceLimits()))
        node = _node(Counter(1), SourceLimits(max_rows_per_epoch=3))
        node = dataclasses.replace(node, spec=dataclasses.replace(node.spec, connector="hinting"))
        chunks = EpochHarness(node).run()
        assert _values(chunks) == [0, 1, 2]
        assert [c.new_keys for c in chunks] == [hints]
