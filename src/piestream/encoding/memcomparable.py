"""Memcomparable keys: plain byte order of encoded keys equals SQL ORDER BY order (reference §1).

A key is the concatenation of its columns' datum encodings, each self-delimiting:

* a NULL tag: ``00``/``01`` (NULL = ``01`` when NULLs are largest, the PostgreSQL default;
  ``00`` for ``ASC NULLS FIRST`` / ``DESC NULLS LAST``), then the value unless NULL;
* DESC inverts every byte of the datum, tag included;
* values: integers big-endian with the sign bit flipped; floats with the IEEE sign trick after
  canonicalizing NaN and -0.0; NUMERIC in the SQLite4 base-100 form (`memcmp_decimal`);
  VARCHAR / BYTEA / JSONB text as escaped 8-byte groups; DATE as i32 days from CE; TIME as u32
  seconds + u32 nanos; TIMESTAMP as i64 seconds + u32 nanos; TIMESTAMPTZ as i64 micros; INTERVAL as
  the i128 total of micros (1 month = 30 days, so '1 mon' and '30 days' are the same key);
  STRUCT fields with composite tags (NULL = ``01``) under the outer inversion; LIST elements
  (composite tags, ascending) written as one byte string.

Normalizations a round trip shows: NaN is canonical and -0.0 becomes +0.0; REAL is rounded to
float32; NUMERIC is rounded to NUMERIC_SCALE digits (`normalize_numeric`) and comes back in that
form; INTERVAL comes back justified (`Interval.from_total_usecs`, saturating at the i32 limits of
months and days); TIMESTAMPTZ comes back in UTC.

Two implementations give identical bytes: `memcmp_scalar` (one datum / row at a time) and
`memcmp_vec` / `memcmp_vec_decode` (whole Arrow columns, numpy). This module is their public face.
"""

from __future__ import annotations

from piestream.encoding.memcmp_scalar import (
    decode_datum,
    decode_row,
    encode_datum,
    encode_row,
    encoded_len,
)
from piestream.encoding.memcmp_vec import encode_columns, encode_columns_arrow
from piestream.encoding.memcmp_vec_decode import decode_keys

__all__ = [
    "decode_datum",
    "decode_keys",
    "decode_row",
    "encode_columns",
    "encode_columns_arrow",
    "encode_datum",
    "encode_row",
    "encoded_len",
]
