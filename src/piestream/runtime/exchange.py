"""What crosses a Spark shuffle between actors: whole StreamChunks as Arrow IPC, and reports.

An element of an epoch job's RDDs is ``(destination, payload)``. The destination is
``(fragment_id, actor_index)`` for data, or `REPORT` for an actor's report (or its failure) to
the driver. A data
payload holds one chunk with the port it arrives on and its (source actor, sequence number), so
the receiving actor can order its input deterministically however the shuffle interleaved it.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from piestream.common.chunk import StreamChunk
from piestream.common.errors import PiestreamError, error_marker
from piestream.storage.hummock.version import SstableInfo, TableWatermark
from piestream.stream.errors import StreamErrorRecord

Destination = tuple[int, ...]
REPORT: Destination = (-1,)
Element = tuple[Destination, bytes]

_KIND_CHUNK = b"C"
_KIND_REPORT = b"R"
_KIND_FAILURE = b"F"


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
    batch = pa.RecordBatch.from_arrays(cols, names=names).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return _KIND_CHUNK + sink.getvalue().to_pybytes()


def decode_chunk(payload: bytes) -> ChunkEnvelope:
    with pa.ipc.open_stream(pa.py_buffer(payload)[1:]) as r:
        batch = r.read_next_batch()
        meta = r.schema.metadata
    ops = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), np.int8)
    chunk = StreamChunk(ops, list(batch.columns[1:]), length=batch.num_rows)
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


def encode_report(report: ActorReport) -> bytes:
    return _KIND_REPORT + pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)


def decode_report(payload: bytes) -> ActorReport:
    report = pickle.loads(payload[1:])
    assert isinstance(report, ActorReport)
    return report


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
    return _KIND_FAILURE + pickle.dumps(failed, protocol=pickle.HIGHEST_PROTOCOL)


def decode_failure(payload: bytes) -> ActorFailed | None:
    """The failure a payload reports, or None if it is an ordinary report."""
    if payload[:1] != _KIND_FAILURE:
        return None
    failed = pickle.loads(payload[1:])
    assert isinstance(failed, ActorFailed)
    return failed


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
    view = memoryview(data)
    (n,) = _ELEMENT_COUNT.unpack_from(view, offset)
    pos = offset + _ELEMENT_COUNT.size
    out: list[Element] = []
    for _ in range(n):  # per element (a chunk or a report), see encode_elements
        k = view[pos]
        dest = struct.unpack_from(f"<{k}q", view, pos + 1)
        pos += 1 + 8 * k
        (size,) = _PAYLOAD_LEN.unpack_from(view, pos)
        pos += _PAYLOAD_LEN.size
        out.append((tuple(dest), bytes(view[pos : pos + size])))
        pos += size
    return out
