"""What crosses a Spark shuffle between actors: whole StreamChunks as Arrow IPC, and reports.

An element of an epoch job's RDDs is ``(destination, payload)``. The destination is
``(fragment_id, actor_index)`` for data, or `REPORT` for an actor's report (or its failure) to
the driver. A data
payload holds one chunk with the port it arrives on and its (source actor, sequence number), so
the receiving actor can order its input deterministically however the shuffle interleaved it.

Nothing here is a pickle: chunks are Arrow IPC, reports and failures a small versioned JSON
document (`REPORT_FORMAT`), since they cross sockets (the leased runner's wire) and a decoder must
not run whatever a peer sends. A payload that does not decode raises `MalformedPayload`, an
`InternalError`: the epoch fails and the barrier manager retries it.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from piestream.common.chunk import NEW_KEYS_METADATA, StreamChunk
from piestream.common.errors import InternalError, PiestreamError, error_marker, parse_error_marker
from piestream.storage.hummock.version import SstableInfo, TableWatermark
from piestream.stream.errors import StreamErrorRecord

Destination = tuple[int, ...]
REPORT: Destination = (-1,)
Element = tuple[Destination, bytes]

_KIND_CHUNK = b"C"
_KIND_REPORT = b"R"
_KIND_FAILURE = b"F"

#: The report / failure document this build writes and the only one it reads.
REPORT_FORMAT = 1


class MalformedPayload(InternalError):
    """Bytes from a peer that are not what the exchange encodes (a bug or a forgery): the epoch
    fails, as a failed Spark job's would, and is retried."""


@dataclass(frozen=True)
class ChunkEnvelope:
    port: str
    source_actor: int
    seq: int
    chunk: StreamChunk


def encode_chunk(port: str, source_actor: int, seq: int, chunk: StreamChunk) -> bytes:
    """One chunk as Arrow IPC (ops column first), with its port and ordering in the metadata."""
    c = chunk.compact()
    cols = [pa.array(c.ops, pa.int8()), *c.columns]
    names = ["__op", *[f"c{i}" for i in range(len(c.columns))]]
    meta = {b"port": port.encode(), b"src": str(source_actor).encode(), b"seq": str(seq).encode()}
    if c.new_keys:  # optional: a receiver that does not know it looks the keys up, as before
        meta[NEW_KEYS_METADATA] = b"1"
    batch = pa.RecordBatch.from_arrays(cols, names=names).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return _KIND_CHUNK + sink.getvalue().to_pybytes()


def chunk_header(payload: bytes) -> tuple[str, int, int]:
    """An encoded chunk's (port, source actor, sequence), from its schema alone (the batch is
    not read)."""
    try:
        if payload[:1] != _KIND_CHUNK:
            raise ValueError("not a chunk")
        with pa.ipc.open_stream(pa.py_buffer(payload)[1:]) as r:
            meta = r.schema.metadata
        return meta[b"port"].decode(), int(meta[b"src"]), int(meta[b"seq"])
    except (pa.ArrowInvalid, KeyError, TypeError, ValueError) as e:
        raise MalformedPayload(f"malformed chunk: {e}") from None


def chunk_source(payload: bytes) -> int:
    """An encoded chunk's source actor (`chunk_header`)."""
    return chunk_header(payload)[1]


def decode_chunk(payload: bytes) -> ChunkEnvelope:
    with pa.ipc.open_stream(pa.py_buffer(payload)[1:]) as r:
        batch = r.read_next_batch()
        meta = r.schema.metadata
    ops = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), np.int8)
    hinted = meta.get(NEW_KEYS_METADATA) == b"1"
    chunk = StreamChunk(ops, list(batch.columns[1:]), length=batch.num_rows, new_keys=hinted)
    return ChunkEnvelope(meta[b"port"].decode(), int(meta[b"src"]), int(meta[b"seq"]), chunk)


@dataclass(frozen=True)
class ActorReport:
    """What an actor tells the driver at the end of its epoch: the SSTs it uploaded."""

    actor_id: int
    epoch: int
    ssts: tuple[SstableInfo, ...]
    watermarks: dict[int, TableWatermark] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)
    #: data errors and inconsistent ops the actor survived this epoch (rw_streaming_errors)
    errors: tuple[StreamErrorRecord, ...] = ()
    #: per WatermarkFilter table it read or raised: the table's global watermark as far as this
    #: actor knows it once the epoch commits (`stream.watermark.reported_watermarks`)
    global_watermarks: dict[int, bytes] = field(default_factory=dict)


def encode_report(report: ActorReport) -> bytes:
    doc = {
        "format": REPORT_FORMAT,
        "actor": report.actor_id,
        "epoch": report.epoch,
        "ssts": [s.to_json() for s in report.ssts],
        "watermarks": [[t, w.to_json()] for t, w in sorted(report.watermarks.items())],
        "stats": report.stats,
        "errors": [dataclasses.astuple(e) for e in report.errors],
    }
    if report.global_watermarks:  # optional: most actors read no filter table
        doc["global_watermarks"] = [[t, w.hex()] for t, w in sorted(report.global_watermarks.items())]
    return _KIND_REPORT + json.dumps(doc, separators=(",", ":")).encode()


def decode_report(payload: bytes) -> ActorReport:
    doc = _document(payload, _KIND_REPORT)
    try:
        report = ActorReport(
            actor_id=_int(doc["actor"]),
            epoch=_int(doc["epoch"]),
            ssts=tuple(SstableInfo.from_json(s) for s in doc["ssts"]),
            watermarks={_int(t): TableWatermark.from_json(w) for t, w in doc["watermarks"]},
            stats={str(k): float(v) for k, v in doc["stats"].items()},
            errors=tuple(_error_record(e) for e in doc["errors"]),
            global_watermarks={_int(t): bytes.fromhex(w) for t, w in doc.get("global_watermarks", ())},
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MalformedPayload(f"malformed actor report: {type(e).__name__}: {e}") from None
    return report


def _document(payload: bytes, kind: bytes) -> dict[str, Any]:
    """The JSON document of a `kind` payload, checked for its format."""
    if payload[:1] != kind:
        raise MalformedPayload(f"expected a {kind!r} payload, got {bytes(payload[:1])!r}")
    try:
        doc = json.loads(bytes(payload[1:]))
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedPayload(f"malformed payload: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise MalformedPayload(f"payload format {got!r} is not {REPORT_FORMAT}")
    return doc


def _int(v: object) -> int:
    if type(v) is not int:
        raise TypeError(f"not an integer: {v!r}")
    return v


def _error_record(e: object) -> StreamErrorRecord:
    if not isinstance(e, list):
        raise TypeError(f"not an error record: {e!r}")
    kind, fragment_id, executor, sqlstate, message, count, sample = e
    return StreamErrorRecord(
        str(kind), _int(fragment_id), str(executor), str(sqlstate), str(message), _int(count), str(sample)
    )


class ActorFailed(Exception):
    """An actor's epoch failed with `error` (what a client may see of the cause).

    Its text carries `error` as a marker: when Spark hands the driver a failed task's exception,
    only its traceback text arrives, and `epoch_error` rebuilds the error from the marker."""

    def __init__(self, error: PiestreamError, fragment_id: int, actor_id: int) -> None:
        marker = error_marker(error, fragment_id=fragment_id, actor_id=actor_id)
        super().__init__(f"actor {actor_id} (fragment {fragment_id}): {error.message} {marker}")
        self.error = error
        self.fragment_id = fragment_id
        self.actor_id = actor_id

    def __reduce__(self) -> tuple[object, ...]:
        return (ActorFailed, (self.error, self.fragment_id, self.actor_id))


def encode_failure(failed: ActorFailed) -> bytes:
    """The failure as its error's marker (class, SQLSTATE, message, detail, hint: what
    `parse_error_marker` rebuilds) and where it happened."""
    doc = {
        "format": REPORT_FORMAT,
        "fragment": failed.fragment_id,
        "actor": failed.actor_id,
        "error": error_marker(failed.error),
    }
    return _KIND_FAILURE + json.dumps(doc, separators=(",", ":")).encode()


def is_failure(payload: bytes) -> bool:
    """Whether a report payload is a failure's (`encode_failure`)."""
    return payload[:1] == _KIND_FAILURE


def decode_failure(payload: bytes) -> ActorFailed | None:
    """The failure a payload reports, or None if it is an ordinary report."""
    if payload[:1] != _KIND_FAILURE:
        return None
    doc = _document(payload, _KIND_FAILURE)
    marked = parse_error_marker(str(doc.get("error", "")))
    if marked is None or type(doc.get("fragment")) is not int or type(doc.get("actor")) is not int:
        raise MalformedPayload("malformed actor failure")
    return ActorFailed(marked[0], doc["fragment"], doc["actor"])


# -- elements framed as bytes (the leased runner's socket exchange) -------------------------------
_ELEMENT_COUNT = struct.Struct("<I")
_PAYLOAD_LEN = struct.Struct("<Q")


def encode_elements(elements: Sequence[Element]) -> bytes:
    """Elements as (destination length, destination, payload length, payload) records. A loop
    per element: an element is a whole chunk or report, never a row."""
    out = [_ELEMENT_COUNT.pack(len(elements))]
    for dest, payload in elements:
        out.append(struct.pack(f"<B{len(dest)}qQ", len(dest), *dest, len(payload)))
        out.append(payload)
    return b"".join(out)


def decode_elements(data: bytes | bytearray | memoryview, offset: int = 0) -> list[Element]:
    """The elements `encode_elements` wrote from `offset` to the end of `data`; anything else
    raises `MalformedPayload`."""
    view = memoryview(data)
    try:
        (n,) = _ELEMENT_COUNT.unpack_from(view, offset)
        pos = offset + _ELEMENT_COUNT.size
        out: list[Element] = []
        for _ in range(n):  # per element (a chunk or a report), see encode_elements
            k = view[pos]
            dest = struct.unpack_from(f"<{k}q", view, pos + 1)
            pos += 1 + 8 * k
            (size,) = _PAYLOAD_LEN.unpack_from(view, pos)
            pos += _PAYLOAD_LEN.size
            if pos + size > len(view):
                raise ValueError("an element runs past the end")
            out.append((tuple(dest), bytes(view[pos : pos + size])))
            pos += size
    except (struct.error, IndexError, ValueError) as e:
        raise MalformedPayload(f"malformed elements: {e}") from None
    if pos != len(view):
        raise MalformedPayload(f"malformed elements: {len(view) - pos} bytes after the last")
    return out
