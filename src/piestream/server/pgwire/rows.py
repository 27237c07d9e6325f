"""Result rows on the wire: RowDescription and DataRow, each column in the format asked for.

Format codes follow the protocol's rule: none means text for every column, one applies to
every column, otherwise one per column. Binary output exists for the types `codec` can send
(0A000 otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from piestream.common.errors import FeatureNotSupported
from piestream.common.types import DataType
from piestream.server.pgwire import codec
from piestream.server.pgwire.protocol import Channel, FieldDescription, data_row, row_description
from piestream.server.results import QueryResult


def describe_columns(columns: Sequence[tuple[str, DataType]], formats: Sequence[int]) -> bytes:
    """The RowDescription message body for `columns` sent in `formats`."""
    return row_description(
        [
            FieldDescription(name, t.pg_oid, t.pg_typlen, codec.type_modifier(t), _format_of(formats, i))
            for i, (name, t) in enumerate(columns)
        ]
    )


def send_rows(
    channel: Channel, result: QueryResult, formats: Sequence[int], start: int = 0, limit: int = 0
) -> int:
    """DataRows from `start` (at most `limit`, 0 = all); returns how many were sent."""
    columns = result.columns
    encoders = [_encoder(t, _format_of(formats, i)) for i, (_, t) in enumerate(columns)]
    rows = result.rows
    end = len(rows) if limit <= 0 else min(len(rows), start + limit)
    send = channel.send
    for row in rows[start:end]:
        send(b"D", data_row([None if v is None else enc(v) for enc, v in zip(encoders, row, strict=False)]))
    return end - start


def _encoder(t: DataType, fmt: int) -> Callable[[Any], bytes]:
    if fmt == 1:
        if not codec.supports_binary(t):
            raise FeatureNotSupported(f"binary output of type {t} is not supported; use text format")
        return lambda v: codec.encode_binary(v, t)
    return lambda v: codec.encode_text(v, t)


def _format_of(formats: Sequence[int], i: int) -> int:
    if not formats:
        return 0
    if len(formats) == 1:
        return formats[0]
    return formats[i] if i < len(formats) else 0
