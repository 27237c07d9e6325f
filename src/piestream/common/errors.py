"""Errors with PostgreSQL SQLSTATEs.

Every error a user can see is a `PiestreamError` carrying the SQLSTATE that PostgreSQL would
report, so pgwire can turn it into an ErrorResponse unchanged. Lower layers raise the specific
subclasses; nothing in piestream raises a bare Exception for bad input.
"""

from __future__ import annotations


class PiestreamError(Exception):
    """Base error: a message, a SQLSTATE, and an optional 1-based character position in the SQL."""

    sqlstate = "XX000"

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        position: int | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.position = position
        self.detail = detail
        self.hint = hint

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (Spark workers -> driver); keep every attribute.
        return (_rebuild, (type(self), self.message, self.sqlstate, self.position, self.detail, self.hint))


def _rebuild(
    cls: type[PiestreamError],
    message: str,
    sqlstate: str,
    position: int | None,
    detail: str | None,
    hint: str | None,
) -> PiestreamError:
    return cls(message, sqlstate=sqlstate, position=position, detail=detail, hint=hint)


class InvalidInput(PiestreamError):
    """A value cannot be parsed or converted (22P02 invalid_text_representation)."""

    sqlstate = "22P02"


class NumericOutOfRange(PiestreamError):
    """A value does not fit its type (22003)."""

    sqlstate = "22003"


class DatetimeOutOfRange(PiestreamError):
    sqlstate = "22008"


class DivisionByZero(PiestreamError):
    sqlstate = "22012"


class DataCorruption(PiestreamError):
    """Stored bytes failed a checksum or cannot be decoded (XX001 data_corrupted)."""

    sqlstate = "XX001"


class FeatureNotSupported(PiestreamError):
    sqlstate = "0A000"


class SyntaxError_(PiestreamError):
    sqlstate = "42601"


class UndefinedTable(PiestreamError):
    sqlstate = "42P01"


class UndefinedColumn(PiestreamError):
    sqlstate = "42703"


class DuplicateObject(PiestreamError):
    sqlstate = "42P07"


class DatatypeMismatch(PiestreamError):
    sqlstate = "42804"


class UndefinedFunction(PiestreamError):
    sqlstate = "42883"


class UniqueViolation(PiestreamError):
    sqlstate = "23505"


class DependentObjectsStillExist(PiestreamError):
    sqlstate = "2BP01"


class StateConsistencyError(PiestreamError):
    """An executor wrote an illegal operation sequence to a state table (reference §4.1)."""

    sqlstate = "XX000"


class StorageError(PiestreamError):
    """The object store failed permanently (58030 io_error)."""

    sqlstate = "58030"


class ObjectNotFound(StorageError):
    """An object store path names no object (58P01 undefined_file)."""

    sqlstate = "58P01"


class InternalError(PiestreamError):
    sqlstate = "XX000"
