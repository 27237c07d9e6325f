"""Session settings (SET / SHOW / RESET) and their defaults, as PostgreSQL clients expect them."""

from __future__ import annotations

from piestream.common.errors import PiestreamError

#: what `streaming_parallelism` and ``SET PARALLELISM`` take for ADAPTIVE (RisingWave's keywords;
#: 0 is its older session value for it)
ADAPTIVE_WORDS = ("adaptive", "auto", "default")

DEFAULT_SETTINGS: dict[str, str] = {
    "application_name": "",
    "client_encoding": "UTF8",
    "client_min_messages": "notice",
    "datestyle": "ISO, MDY",
    "default_transaction_isolation": "repeatable read",
    "default_transaction_read_only": "off",
    "extra_float_digits": "1",
    "implicit_flush": "true",
    "integer_datetimes": "on",
    "intervalstyle": "postgres",
    "is_superuser": "on",
    "search_path": '"$user", public',
    "server_encoding": "UTF8",
    "server_version": "13.14.0",
    "server_version_num": "130014",
    "standard_conforming_strings": "on",
    "lock_timeout": "0",  # how long a table lock is waited for (0: until it is granted)
    "statement_timeout": "0",
    "streaming_parallelism": "",
    "timezone": "UTC",
    "transaction_buffer_limit": "256MB",  # a transaction block's buffered changes, at most
    "transaction_isolation": "repeatable read",
    "transaction_read_only": "off",
}


def duration_seconds(value: str) -> float:
    """statement_timeout / lock_timeout: milliseconds, or a number with a unit (ms, s, min, h); 0 disables."""
    text = value.strip().lower().strip("'")
    units = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)].strip()) * units[unit]
            except ValueError:
                return 0.0
    try:
        return float(text) / 1000.0
    except ValueError:
        return 0.0


def parallelism_setting(value: str) -> int | None:
    """A `streaming_parallelism` value: a number of actors (FIXED), or None for ADAPTIVE
    (``adaptive``, ``auto``, ``default`` or 0, as in RisingWave); anything else is refused."""
    v = value.strip().strip("'").lower()
    if v in ADAPTIVE_WORDS or v == "0":
        return None
    if not v.isdigit():
        raise PiestreamError(
            f'invalid value for parameter "streaming_parallelism": "{value}"',
            sqlstate="22023",
            hint="A positive number of actors, or ADAPTIVE.",
        )
    return int(v)
