"""Value encoding of rows: RisingWave's "basic" row-based value encoding (reference §2.1).

A stored row is the concatenation of one datum per value column, with no header: the reader must
know the column types. A datum is ``00`` for NULL, or ``01`` followed by the payload:

==============  =====================================================================
BOOLEAN         1 byte, 0 / 1
SMALLINT..      little-endian i16 / i32 / i64 (SERIAL = i64)
REAL, DOUBLE    raw little-endian IEEE bits (no NaN or -0.0 normalization)
NUMERIC         16 bytes of rust_decimal: flags u32 (scale in bits 16..23, sign bit 31), then
                lo, mid, hi u32 of the 96-bit mantissa; byte 0 = 1 NaN, 2 +Inf, 3 -Inf.
                Written normalized (no trailing zeros, unsigned zero).
VARCHAR, BYTEA  u32 length + bytes (UTF-8 for VARCHAR)
JSONB           u32 length + (``01`` version byte ++ JSON text)
DATE            i32 days from CE (0001-01-01 = 1, 1970-01-01 = 719163)
TIME            u32 seconds since midnight + u32 nanoseconds
TIMESTAMP       i64 Unix seconds (floor) + u32 sub-second nanoseconds
TIMESTAMPTZ     i64 microseconds since the Unix epoch
INTERVAL        i32 months + i32 days + i64 microseconds
STRUCT          the field datums, concatenated
LIST            u32 element count + the element datums
==============  =====================================================================

Two codecs produce identical bytes: the scalar one for Python datums (`encode_datum`,
`decode_datum`, `encode_row`, `decode_row`; module `value_datum`) and the vectorized one for
Arrow columns, the hot path of state tables and vnode hashing (`encode_columns`,
`encode_columns_arrow`, `decode_values`; modules `value_encode`, `value_decode`). Encoding
validates values (`InvalidInput`, `NumericOutOfRange`); decoding raises `DataCorruption` for
bytes it cannot turn into values of the requested types.
"""

from __future__ import annotations

from piestream.encoding.value_datum import decode_datum, decode_row, encode_datum, encode_row
from piestream.encoding.value_decode import decode_values
from piestream.encoding.value_encode import encode_columns, encode_columns_arrow

__all__ = [
    "decode_datum",
    "decode_row",
    "decode_values",
    "encode_columns",
    "encode_columns_arrow",
    "encode_datum",
    "encode_row",
]
