"""What the text forms of all types share: blanks, type names in messages, SQLSTATEs.

PostgreSQL trims C ``isspace()`` blanks around non-string input and treats them as blanks inside
record and array literals; its input errors name types the SQL way (``double precision``,
``timestamp with time zone``); and a few of its input errors have SQLSTATEs without an error
class of their own in `piestream.common.errors`.
"""

from __future__ import annotations

from piestream.common.types import TypeKind

#: C isspace(): what PostgreSQL trims around non-string input and treats as blanks in composites.
WS = " \t\n\r\v\f"

#: SQLSTATEs without an error class of their own (the error class still says what went wrong).
BAD_DATETIME_FORMAT = "22007"  # invalid_datetime_format
TZ_DISPLACEMENT = "22009"  # invalid_time_zone_displacement_value
INVALID_PARAMETER = "22023"  # invalid_parameter_value
UNTRANSLATABLE = "22P05"  # untranslatable_character

#: The type names PostgreSQL puts in input error messages.
PG_NAME = {
    TypeKind.BOOLEAN: "boolean",
    TypeKind.SMALLINT: "smallint",
    TypeKind.INT: "integer",
    TypeKind.BIGINT: "bigint",
    TypeKind.SERIAL: "bigint",
    TypeKind.NUMERIC: "numeric",
    TypeKind.REAL: "real",
    TypeKind.DOUBLE: "double precision",
    TypeKind.DATE: "date",
    TypeKind.TIME: "time",
    TypeKind.TIMESTAMP: "timestamp",
    TypeKind.TIMESTAMPTZ: "timestamp with time zone",
}
