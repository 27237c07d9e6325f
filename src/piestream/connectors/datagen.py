"""The ``datagen`` source connector (RisingWave's options), for tests and demos.

Per column ``fields.<col>.kind = 'sequence' | 'random'`` (default random):
- sequence: ``start`` (0) … ``end``: row r has ``start + r``; the source ends when a sequence
  passes its end (timestamps: ``start`` + r seconds; strings: the number as text);
- random: numbers uniform in [``min``, ``max``] (0, 32767), strings of ``length`` (10) letters,
  timestamps ``base`` minus up to ``max_past`` (default 1 day), booleans; ``seed`` (0) varies
  the stream. Random values are a pure function of (seed, column, row), so splits, retries and
  restarts regenerate the same rows.

``datagen.rows.per.second`` (or ``rows.per.second``; default 10; 0 = unlimited) is the rate for the
whole source; ``datagen.split.num`` (1) splits; split s makes rows r ≡ s (mod splits).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

import numpy as np
import pyarrow as pa

from piestream.common import numeric as nm
from piestream.common.epoch import EpochPair
from piestream.common.interval import Interval
from piestream.common.text import parse_datum
from piestream.common.types import DataType, TypeKind
from piestream.connectors.options import InvalidOption, parse_float, parse_int, source_limits
from piestream.connectors.rand import below, draws, unit
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.stream.connector import ReadResult, SourceReader

_INTS = {TypeKind.SMALLINT: 2**15 - 1, TypeKind.INT: 2**31 - 1, TypeKind.BIGINT: 2**63 - 1}
_FLOATS = (TypeKind.REAL, TypeKind.DOUBLE, TypeKind.NUMERIC)
_TIMES = (TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ, TypeKind.DATE)
_DEFAULT_BASE = "2021-04-01 00:00:00"
_EPOCH_US = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class FieldGen:
    """How one column is generated (numbers already parsed for its type)."""

    name: str
    data_type: DataType
    kind: str  # "sequence" | "random"
    start: float = 0  # sequence start; random min
    end: float | None = None  # sequence end; random max
    length: int = 10
    seed: int = 0
    base_us: int = 0  # timestamps: sequence start / random base, microseconds since 1970
    max_past_us: int = 86_400_000_000

    def rows_available(self) -> int | None:
        """Rows before this sequence passes its end (None: unbounded)."""
        if self.kind != "sequence" or self.end is None:
            return None
        return max(0, int(self.end - self.start) + 1)

    def column(self, rows: np.ndarray, stream: int) -> pa.Array:
        k = self.data_type.kind
        if self.kind == "sequence":
            if k in _TIMES:
                us = self.base_us + rows * 1_000_000
                return _time_array(us, self.data_type)
            if k is TypeKind.VARCHAR:
                return pa.array((rows + int(self.start)).astype(str), pa.string())
            vals = rows + int(self.start) if k not in _FLOATS else rows + self.start
            return _num_array(vals, self.data_type)
        bits = draws(rows, stream, self.seed)
        if k is TypeKind.BOOLEAN:
            return pa.array((bits & np.uint64(1)).astype(bool))
        if k is TypeKind.VARCHAR:
            letters = draws(
                rows[:, None] * self.length + np.arange(self.length), stream, self.seed
            ) % np.uint64(26)
            data = (letters.astype(np.uint8) + ord("a")).reshape(-1)
            offsets = np.arange(0, len(rows) * self.length + 1, self.length, dtype=np.int32)
            return pa.Array.from_buffers(
                pa.string(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
        if k in _TIMES:
            return _time_array(self.base_us - below(bits, max(self.max_past_us, 1)), self.data_type)
        lo, hi = self.start, self.end if self.end is not None else 32767
        if k in _INTS:
            return _num_array(int(lo) + below(bits, int(hi) - int(lo) + 1), self.data_type)
        return _num_array(lo + unit(bits) * (hi - lo), self.data_type)


def _num_array(vals: np.ndarray, t: DataType) -> pa.Array:
    if t.kind is TypeKind.NUMERIC and nm.is_numeric_type(t.arrow):  # per-value scales (issue 14)
        return nm.to_arrow([nm.check(Decimal(repr(float(v)))) for v in vals])
    if t.kind is TypeKind.NUMERIC:
        return pa.array([Decimal(repr(float(v))) for v in vals], t.arrow)
    return pa.array(vals).cast(t.arrow)


def _time_array(us: np.ndarray, t: DataType) -> pa.Array:
    arr = pa.array(np.asarray(us, np.int64), pa.timestamp("us"))
    if t.kind is TypeKind.DATE:
        return arr.cast(pa.date32())
    return arr.cast(t.arrow)


@dataclass(frozen=True)
class DatagenReader:
    fields: tuple[FieldGen, ...]
    split_num: int = 1

    def splits(self) -> list[str]:
        return [str(i) for i in range(self.split_num)]

    def total_rows(self) -> int | None:
        bounds = [n for f in self.fields if (n := f.rows_available()) is not None]
        return min(bounds) if bounds else None

    def read(self, split: str, offset: str | None, budget: int, epoch: EpochPair) -> ReadResult:
        s = int(split)
        j0 = int(offset) if offset else 0
        j1 = j0 + budget
        total = self.total_rows()
        if total is not None:
            j1 = min(j1, max(0, -(-(total - s) // self.split_num)))
        if j1 <= j0:
            return ReadResult([], str(j0), 0)
        rows = s + np.arange(j0, j1, dtype=np.int64) * self.split_num
        cols = [f.column(rows, i) for i, f in enumerate(self.fields)]
        batch = pa.RecordBatch.from_arrays(cols, names=[f.name for f in self.fields])
        return ReadResult([batch], str(j1), j1 - j0)


def _field(spec: SourceSpec, name: str, t: DataType) -> FieldGen:
    def opt(key: str) -> str | None:
        return spec.options.get(f"fields.{name}.{key}")

    kind = (opt("kind") or "random").strip().lower()
    if kind not in ("sequence", "random"):
        raise InvalidOption(f"fields.{name}.kind must be 'sequence' or 'random', got '{kind}'")
    k = t.kind
    if (
        k not in _INTS
        and k not in _FLOATS
        and k not in _TIMES
        and k not in (TypeKind.VARCHAR, TypeKind.BOOLEAN)
    ):
        raise InvalidOption(f'datagen cannot generate column "{name}" of type {t}')
    if kind == "sequence" and k is TypeKind.BOOLEAN:
        raise InvalidOption(f'datagen cannot generate a sequence for boolean column "{name}"')
    seed = parse_int(f"fields.{name}.seed", opt("seed") or "0")
    length = parse_int(f"fields.{name}.length", opt("length") or "10", minimum=0)
    if k in _TIMES:
        base_text = opt("start" if kind == "sequence" else "base") or _DEFAULT_BASE
        try:
            base = parse_datum(base_text, DataType(TypeKind.TIMESTAMP))
        except Exception as e:
            raise InvalidOption(f"fields.{name}: bad timestamp '{base_text}': {e}") from None
        assert isinstance(base, dt.datetime)
        base_us = (base - _EPOCH_US) // dt.timedelta(microseconds=1)
        past = Interval(0, 1, 0)
        if opt("max_past"):
            p = parse_datum(opt("max_past") or "", DataType(TypeKind.INTERVAL))
            assert isinstance(p, Interval)
            past = p
        past_us = past.months * 30 * 86_400_000_000 + past.days * 86_400_000_000 + past.usecs
        end = parse_float(f"fields.{name}.end", opt("end") or "0") if opt("end") else None
        return FieldGen(name, t, kind, 0, end, length, seed, base_us, past_us)
    lo_key, hi_key = ("start", "end") if kind == "sequence" else ("min", "max")
    lo = parse_float(f"fields.{name}.{lo_key}", opt(lo_key) or "0")
    hi_text = opt(hi_key)
    hi = parse_float(f"fields.{name}.{hi_key}", hi_text) if hi_text else None
    if hi is not None and hi < lo:
        raise InvalidOption(f"fields.{name}.{hi_key} is below fields.{name}.{lo_key}")
    if k in _INTS and hi is not None and max(abs(lo), abs(hi)) > _INTS[k]:
        raise InvalidOption(f"fields.{name}: range does not fit {t}")
    return FieldGen(name, t, kind, lo, hi, length, seed)


def datagen_connector(spec: SourceSpec) -> tuple[SourceReader, SourceLimits]:
    if spec.generated:
        raise InvalidOption("generated columns are not supported in a datagen source")
    known = {c for c, _ in spec.columns}
    for key in spec.options:
        if key.startswith("fields.") and key.split(".")[1] not in known:
            raise InvalidOption(f'option "{key}" names no column of the source')
    fields = tuple(_field(spec, n, t) for n, t in spec.columns)
    rate_text = spec.option("datagen.rows.per.second", "rows.per.second", default="10") or "10"
    rate = parse_float("datagen.rows.per.second", rate_text, minimum=0)
    split_num = parse_int(
        "datagen.split.num", spec.option("datagen.split.num", default="1") or "1", minimum=1
    )
    return DatagenReader(fields, split_num), source_limits(spec, default_rate=rate if rate > 0 else None)
