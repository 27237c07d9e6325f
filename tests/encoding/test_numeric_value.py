"""The per-value-scale NUMERIC layout in the durable encodings (issue 14): value payloads keep the
display scale and stay byte-compatible with today's writer for normalized values; key bytes are
today's keys, whatever the scale."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from piestream.common import numeric as nm
from piestream.common.errors import DataCorruption, NumericOutOfRange
from piestream.encoding.memcmp_decimal import encode_decimal
from piestream.encoding.numeric_value import from_value_payloads, key_bytes, value_payloads
from piestream.encoding.value_datum import numeric_payload, unpack_numeric

MAX96 = str(2**96 - 1)


def col(*texts: str | None) -> pa.Array:
    return nm.to_arrow([None if t is None else nm.parse(t) for t in texts])


def texts(arr: pa.Array) -> list[str | None]:
    return [None if v is None else nm.format_numeric(v) for v in nm.from_arrow(arr)]


def test_payloads_round_trip_scales_specials_and_nulls() -> None:
    values = ["1.50", "1.5", "0.00", None, "-2.000", "NaN", "Infinity", "-Infinity", MAX96, "-" + MAX96]
    values += ["0.0000000000000000000000000001", "-7922816251426433759354395033.5"]
    arr = col(*values)
    valid = np.array([v is not None for v in values])
    back = from_value_payloads(value_payloads(arr), valid)
    assert texts(back) == [None if v is None else nm.format_numeric(nm.parse(v)) for v in values]
    assert texts(back)[:3] == ["1.50", "1.5", "0.00"]


def test_normalized_values_have_todays_payload_bytes_and_todays_payloads_decode() -> None:
    """Old data (normalized payloads) reads back as the same values."""
    values = ["1.5", "-0.001", "0", "NaN", "Infinity", "-Infinity", MAX96, "123456789.123456789"]
    got = value_payloads(col(*values))
    for row, v in zip(got, values, strict=True):
        assert bytes(row) == numeric_payload(Decimal(v)), v
    old = np.frombuffer(b"".join(numeric_payload(Decimal(v)) for v in values), np.uint8).reshape(-1, 16)
    assert texts(from_value_payloads(old, None)) == [nm.format_numeric(nm.parse(v)) for v in values]


def test_a_kept_trailing_zero_reads_back() -> None:
    """1.50's payload keeps its scale and the row decoder reads it as written (the decoder before
    per-value scales called it corrupt, which is why relations holding such values are of
    RELATION_FORMAT 4: an older piestream refuses them by number)."""
    (payload,) = value_payloads(col("1.50"))
    assert unpack_numeric(bytes(payload), 0) == (False, 150, 2)  # mantissa 150 at scale 2


def test_beyond_96_bits_is_22003() -> None:
    with pytest.raises(NumericOutOfRange) as e:
        value_payloads(col(str(2**96)))
    assert e.value.sqlstate == "22003"


@pytest.mark.parametrize(
    "flags",
    [
        0x0000_0100,  # reserved bits
        0x0100_0000,
        0x001D_0000,  # scale 29
        0x8000_0000,  # negative zero
        0x0000_0004,  # unknown special
        0x0001_0001,  # NaN with a scale
    ],
)
def test_corrupt_payloads_are_detected(flags: int) -> None:
    payload = np.frombuffer(np.array([flags, 0, 0, 0], "<u4").tobytes(), np.uint8).reshape(1, 16)
    with pytest.raises(DataCorruption):
        from_value_payloads(payload, None)
    # ... but not under a NULL, whose bytes nobody reads
    assert texts(from_value_payloads(payload, np.array([False]))) == [None]


def test_special_with_a_mantissa_is_corrupt() -> None:
    payload = np.frombuffer(np.array([1, 5, 0, 0], "<u4").tobytes(), np.uint8).reshape(1, 16)
    with pytest.raises(DataCorruption):
        from_value_payloads(payload, None)


def test_keys_are_todays_keys_and_equal_values_share_one() -> None:
    values = ["1.50", "1.5", "0.000", "0", "-2.10", "NaN", "Infinity", "-Infinity", None, "-" + MAX96, "7e28"]
    keys = key_bytes(col(*values))
    for k, v in zip(keys, values, strict=True):
        assert k == (None if v is None else encode_decimal(Decimal(v))), v
    assert keys[0] == keys[1] and keys[2] == keys[3]
    present = [(k, v) for k, v in zip(keys, values, strict=True) if k is not None]
    ordered = [v for _, v in sorted(present, key=lambda p: p[0])]
    assert ordered[0] == "-Infinity" and ordered[-2:] == ["Infinity", "NaN"]
    assert ordered[1] == "-" + MAX96 and ordered[-3] == "7e28"
