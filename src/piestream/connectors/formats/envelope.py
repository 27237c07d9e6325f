"""Envelopes (FORMAT PLAIN | UPSERT | DEBEZIUM): what a batch of (key, value) messages means as
changes — rows and their ops — given a decoder for the payloads (RisingWave's plain, upsert and
debezium parsers composed with an access builder, here per batch).

- PLAIN: each value is a row, inserted; a message without a value is no row.
- UPSERT: a value is the row of its key, inserted (a table with a primary key resolves it to an
  update, seed 003's upsert → changelog); a value-less message (tombstone) deletes its key's row,
  the key columns decoded from the message key (a JSON object like the value).
- DEBEZIUM (JSON): ``{"before", "after", "op"}`` (optionally inside ``"payload"``): op c / r
  inserts `after`, u updates `before` to `after` (an insert of `after` when `before` is absent),
  d deletes `before`; a tombstone is no row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from piestream.common.chunk import Op
from piestream.common.scalar import Datum
from piestream.connectors.formats.decode import (
    ARROW_JSON_KINDS,
    BadValue,
    Columns,
    Decoded,
    Decoder,
    JsonDecoder,
    Payloads,
    decode_rows,
    message,
    object_row,
    payload_list,
    read_json_blob,
    rows_table,
)

FORMATS = ("plain", "upsert", "debezium")


@dataclass
class Parsed:
    """A batch's changes: `table` rows with `ops` (None: all inserts), each from the message
    index in `rows`; `errors` (message index, text) as in `Decoded`."""

    table: pa.Table
    ops: np.ndarray | None
    rows: np.ndarray
    errors: list[tuple[int, str]] = field(default_factory=list)


def _pick(payloads: Payloads, idx: np.ndarray) -> Payloads:
    if isinstance(payloads, pa.Array):
        return payloads.take(pa.array(idx, pa.int64()))
    return [payloads[i] for i in idx.tolist()]


def _subset(decoder: Decoder, payloads: Payloads, idx: np.ndarray) -> Decoded:
    """Decode the payloads at `idx`, indices mapped back to the whole batch."""
    d = decoder.decode(_pick(payloads, idx))
    return Decoded(d.table, idx[d.rows], [(int(idx[i]), m) for i, m in d.errors])


def _present(values: Payloads) -> np.ndarray:
    if isinstance(values, pa.Array):
        return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if None not in values:  # the usual case, at C speed
        return np.ones(len(values), np.bool_)
    return np.fromiter((v is not None for v in values), np.bool_, len(values))


@dataclass(frozen=True)
class PlainEnvelope:
    decoder: Decoder

    def parse(self, keys: Payloads, values: Payloads) -> Parsed:
        has = _present(values)
        if has.all():
            d = self.decoder.decode(values)
        else:
            d = _subset(self.decoder, values, np.flatnonzero(has))
        return Parsed(d.table, None, d.rows, d.errors)


@dataclass(frozen=True)
class UpsertEnvelope:
    decoder: Decoder  # of the value (and of the key, for tombstones)

    def parse(self, keys: Payloads, values: Payloads) -> Parsed:
        has = _present(values)
        ins = _subset(self.decoder, values, np.flatnonzero(has))
        keyed = _present(keys)
        missing = np.flatnonzero(~has & ~keyed).tolist()
        dels = _subset(self.decoder, keys, np.flatnonzero(~has & keyed))
        errors = ins.errors + dels.errors + [(i, "a tombstone without a key") for i in missing]
        table = pa.concat_tables([ins.table, dels.table.cast(ins.table.schema)])
        rows = np.concatenate([ins.rows, dels.rows])
        ops = np.concatenate(
            [np.full(len(ins.rows), Op.INSERT, np.int8), np.full(len(dels.rows), Op.DELETE, np.int8)]
        )
        order = np.argsort(rows, kind="stable")  # back into message order
        return Parsed(table.take(pa.array(order)), ops[order], rows[order], sorted(errors))


@dataclass(frozen=True)
class DebeziumEnvelope:
    """Debezium's JSON change events."""

    columns: Columns
    lenient: bool = False

    def parse(self, keys: Payloads, values: Payloads) -> Parsed:
        idx = np.flatnonzero(_present(values))  # tombstones follow deletes: no change
        vals = _pick(values, idx)
        fast = self._fast(vals)
        if fast is None:
            return self._rows(payload_list(vals), idx)
        return _changes(*fast, idx, [])

    def _fast(
        self, payloads: Payloads
    ) -> tuple[pa.Table, pa.Table, np.ndarray, np.ndarray, list[str | None]] | None:
        """pyarrow's reader over the batch, rows as structs of the columns' exact Arrow types."""
        kinds = [t.kind for _, t in self.columns]
        if not len(payloads) or any(k not in ARROW_JSON_KINDS for k in kinds):
            return None
        row = pa.struct([(c, t.arrow) for c, t in self.columns])
        inner = [("before", row), ("after", row), ("op", pa.string())]
        schema = pa.schema([*inner, ("payload", pa.struct(inner))])
        t = read_json_blob(payloads, schema, unexpected="ignore")
        if t is None:
            return None
        wrapped = t.column("payload").combine_chunks()

        def pick(name: str) -> pa.Array:
            top = t.column(name).combine_chunks()
            if wrapped.null_count == len(wrapped):
                return top
            return pc.if_else(wrapped.is_valid(), wrapped.field(name), top)

        names = [c for c, _ in self.columns]
        out: list[Any] = []
        for side in ("before", "after"):
            arr = pick(side)
            out.append(pa.Table.from_arrays(arr.flatten(), names=names))
            out.append(np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.bool_))
        return out[0], out[2], out[1], out[3], pick("op").to_pylist()

    def _rows(self, vals: Sequence[bytes | None], idx: np.ndarray) -> Parsed:
        """The row path: per event, for batches the reader could not decode exactly."""
        events: list[tuple[list[Datum] | None, list[Datum] | None, str]] = []
        kept: list[int] = []

        def row(i: int, notes: list[str]) -> list[Datum] | None:
            ev = json.loads(vals[i])  # type: ignore[arg-type]
            if isinstance(ev, dict) and isinstance(ev.get("payload"), dict):
                ev = ev["payload"]
            if not isinstance(ev, dict):
                raise BadValue("not a Debezium change event (a JSON object with op, before, after)")
            op = ev.get("op")
            b, a = ev.get("before"), ev.get("after")
            before = None if b is None else object_row(b, self.columns, self.lenient, notes)
            after = None if a is None else object_row(a, self.columns, self.lenient, notes)
            events.append((before, after, op if isinstance(op, str) else ""))
            kept.append(i)
            return None

        d = decode_rows(len(vals), row, self.columns)
        nulls: list[Datum] = [None] * len(self.columns)
        before_t = rows_table([b if b is not None else nulls for b, _, _ in events], self.columns)
        after_t = rows_table([a if a is not None else nulls for _, a, _ in events], self.columns)
        bvalid = [b is not None for b, _, _ in events]
        avalid = [a is not None for _, a, _ in events]
        errors = [(int(idx[i]), m) for i, m in d.errors]
        return _changes(
            before_t,
            after_t,
            bvalid,
            avalid,
            [o for _, _, o in events],
            idx[np.array(kept, np.int64)],
            errors,
        )


def _changes(
    before: pa.Table,
    after: pa.Table,
    bvalid: Sequence[bool] | np.ndarray,
    avalid: Sequence[bool] | np.ndarray,
    ops: Sequence[str | None],
    idx: np.ndarray,
    errors: list[tuple[int, str]],
) -> Parsed:
    """Rows and ops of the events (message index `idx[i]` per event i): one or two rows each,
    gathered from [before ; after] in one take per column."""
    n = len(ops)
    op = np.array([o or "" for o in ops], dtype=object)
    bv = np.asarray(bvalid, np.bool_)
    av = np.asarray(avalid, np.bool_)
    ins = ((op == "c") | (op == "r") | ((op == "u") & ~bv)) & av
    upd = (op == "u") & bv & av
    dele = (op == "d") & bv
    bad = ~(ins | upd | dele)
    errors = errors + [
        (int(idx[i]), f"not a Debezium change event: op {ops[i]!r} with before/after missing")
        for i in np.flatnonzero(bad).tolist()
    ]
    ev = np.arange(n, dtype=np.int64)
    # (event, sub, source position in [before ; after], op)
    parts = [
        (ev[ins], 0, n + ev[ins], Op.INSERT),
        (ev[upd], 0, ev[upd], Op.UPDATE_DELETE),
        (ev[upd], 1, n + ev[upd], Op.UPDATE_INSERT),
        (ev[dele], 0, ev[dele], Op.DELETE),
    ]
    e = np.concatenate([p[0] for p in parts])
    sub = np.concatenate([np.full(len(p[0]), p[1], np.int64) for p in parts])
    src = np.concatenate([p[2] for p in parts])
    ops_out = np.concatenate([np.full(len(p[0]), p[3], np.int8) for p in parts])
    order = np.lexsort((sub, e))
    both = pa.concat_tables([before, after.cast(before.schema)]) if n else before
    table = both.take(pa.array(src[order])) if n else before
    return Parsed(table, ops_out[order], idx[e[order]], sorted(errors))


def envelope(fmt: str, decoder: Decoder, columns: Columns, lenient: bool) -> Any:
    if fmt == "upsert":
        return UpsertEnvelope(decoder)
    if fmt == "debezium":
        if not isinstance(decoder, JsonDecoder):
            raise BadValue("FORMAT DEBEZIUM needs ENCODE JSON")
        return DebeziumEnvelope(columns, lenient)
    return PlainEnvelope(decoder)


__all__ = ["FORMATS", "DebeziumEnvelope", "Parsed", "PlainEnvelope", "UpsertEnvelope", "envelope", "message"]
