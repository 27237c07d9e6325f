"""Parsing WITH (...) options shared by every connector: rate limits, epoch caps, error policy.

Options are strings in SQL; a bad value is the user's error (SQLSTATE 22023) naming the option,
raised when the source/table/sink is created — never later inside a streaming epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from piestream.common.errors import PiestreamError
from piestream.plan.source import SourceLimits, SourceSpec

DEFAULT_MAX_ROWS_PER_EPOCH = 1_000_000


class InvalidOption(PiestreamError):
    sqlstate = "22023"  # invalid_parameter_value


def parse_int(name: str, value: str, *, minimum: int | None = None) -> int:
    try:
        v = int(value.strip())
    except ValueError:
        raise InvalidOption(f'option "{name}" must be an integer, got "{value}"') from None
    if minimum is not None and v < minimum:
        raise InvalidOption(f'option "{name}" must be at least {minimum}, got {v}')
    return v


def parse_float(name: str, value: str, *, minimum: float | None = None) -> float:
    try:
        v = float(value.strip())
    except ValueError:
        raise InvalidOption(f'option "{name}" must be a number, got "{value}"') from None
    if minimum is not None and v < minimum:
        raise InvalidOption(f'option "{name}" must be at least {minimum}, got {v}')
    return v


def parse_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "t", "on", "1", "yes"):
        return True
    if v in ("false", "f", "off", "0", "no"):
        return False
    raise InvalidOption(f'option "{name}" must be a boolean, got "{value}"')


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items()}


RATE_OPTIONS = ("source_rate_limit", "source.rate.limit", "rate.limit")
MAX_ROWS_OPTIONS = ("max.rows.per.epoch", "source.max.rows.per.epoch")
ERROR_OPTIONS = ("error.handling", "error_handling")


ERROR_HANDLING = ("reject", "dead_letter", "skip")


def source_limits(
    spec: SourceSpec,
    *,
    default_rate: float | None = None,
    chunk_size: int | None = None,
    default_handling: str = "reject",
) -> SourceLimits:
    """The limits every source accepts: ``source_rate_limit`` (rows or events per second for the
    whole source; 0 or negative = unlimited), ``max.rows.per.epoch`` and ``error.handling``
    (reject | dead_letter | skip; message connectors default to skip, RisingWave's rule)."""
    rate = default_rate
    for name in RATE_OPTIONS:
        if name in spec.options:
            r = parse_float(name, spec.options[name])
            rate = r if r > 0 else None
            break
    max_rows = DEFAULT_MAX_ROWS_PER_EPOCH
    for name in MAX_ROWS_OPTIONS:
        if name in spec.options:
            max_rows = parse_int(name, spec.options[name], minimum=1)
            break
    handling = (spec.option(*ERROR_OPTIONS) or default_handling).strip().lower().replace("-", "_")
    if handling not in ERROR_HANDLING:
        raise InvalidOption(f"error.handling must be 'reject', 'dead_letter' or 'skip', got '{handling}'")
    return SourceLimits(
        rate_limit=rate, max_rows_per_epoch=max_rows, chunk_size=chunk_size, error_handling=handling
    )
