"""Errors with PostgreSQL SQLSTATEs.

Every error a user can see is a `PiestreamError` carrying the SQLSTATE that PostgreSQL would
report, so pgwire can turn it into an ErrorResponse unchanged. Lower layers raise the specific
subclasses; nothing in piestream raises a bare Exception for bad input.
"""

from __future__ import annotations

import base64
import json
import re


class PiestreamError(Exception):
    """Base error: a message, a SQLSTATE, and an optional 1-based character position in the SQL."""

    sqlstate = "XX000"
    #: attributes of a subclass (str, int or None) that cross processes with it: pickled, and
    #: carried by its `error_marker` (a caller matches on them instead of parsing the text)
    marker_fields: tuple[str, ...] = ()

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

    @classmethod
    def _clean_copy(cls, e: PiestreamError, message: str, detail: str | None) -> PiestreamError:
        try:
            return cls(message, sqlstate=e.sqlstate, position=e.position, detail=detail, hint=e.hint)
        except TypeError:  # a subclass with its own constructor
            return PiestreamError(
                message, sqlstate=e.sqlstate, position=e.position, detail=detail, hint=e.hint
            )

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (Spark workers -> driver); keep every attribute.
        fields = {f: getattr(self, f, None) for f in self.marker_fields}
        return (
            _rebuild,
            (type(self), self.message, self.sqlstate, self.position, self.detail, self.hint, fields),
        )


def _rebuild(
    cls: type[PiestreamError],
    message: str,
    sqlstate: str,
    position: int | None,
    detail: str | None,
    hint: str | None,
    fields: dict[str, object] | None = None,
) -> PiestreamError:
    error = cls(message, sqlstate=sqlstate, position=position, detail=detail, hint=hint)
    for k, v in (fields or {}).items():
        setattr(error, k, v)
    return error


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


class ExternalRoutineException(PiestreamError):
    """38000: a user-defined function's own code failed (a Python UDF raised). A data error like
    division by zero: batch queries fail with it, streaming turns the row into NULL."""

    sqlstate = "38000"


class DuplicateFunction(PiestreamError):
    sqlstate = "42723"


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


class StatementTooComplex(PiestreamError):
    """Nested too deeply for the parser or binder (54001, PostgreSQL's stack depth limit)."""

    sqlstate = "54001"


#: SQLSTATE classes of *data errors*: the same input fails every attempt, whatever the machine.
#: 22 data exception (division by zero, overflow, bad cast ...), 23 integrity constraint
#: violation, 38 external routine exception (a user-defined function raised).
DATA_ERROR_CLASSES = ("22", "23", "38")


def is_data_error(error: PiestreamError) -> bool:
    """An error caused by the data a row holds (streaming: NULL plus an error record), as opposed
    to a bug or an exhausted resource (the job fails)."""
    return error.sqlstate[:2] in DATA_ERROR_CLASSES or error.sqlstate == "54000"


# -- errors crossing process boundaries and reaching clients ---------------------------------------

_MARKER = re.compile(r"\[piestream-error:([A-Za-z0-9_=-]+)\]")
_TRACEBACK = "Traceback (most recent call last)"
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>]+\(.*\)\s*$|^\s+\.\.\. \d+ more\s*$")
_MAX_SUMMARY = 400


def error_marker(error: PiestreamError, **where: int) -> str:
    """`error` as one line that survives being printed into a traceback.

    Spark hands a Python worker's exception to the driver as text only (its traceback); this
    marker, written into the exception's message, lets the driver rebuild the very error (class,
    SQLSTATE, message, detail, hint and its `marker_fields`) instead of scraping the traceback.
    `where` adds context (fragment and actor ids)."""
    payload: dict[str, object] = {
        "class": f"{type(error).__module__}.{type(error).__qualname__}",
        "sqlstate": error.sqlstate,
        "message": error.message,
        "detail": error.detail,
        "hint": error.hint,
        **where,
    }
    if error.marker_fields:
        payload["fields"] = {f: getattr(error, f, None) for f in error.marker_fields}
    data = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
    return f"[piestream-error:{data}]"


def parse_error_marker(text: str) -> tuple[PiestreamError, dict[str, int]] | None:
    """The error of the last marker in `text` (Spark's most recent failure) and its context."""
    found = _MARKER.findall(text)
    if not found:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(found[-1]))
        message = str(payload.pop("message"))
        sqlstate = str(payload.pop("sqlstate"))
        detail, hint = payload.pop("detail"), payload.pop("hint")
        cls = _error_classes().get(str(payload.pop("class")), PiestreamError)
        fields = dict(payload.pop("fields", None) or {})
    except (ValueError, KeyError, TypeError):
        return None
    where = {k: int(v) for k, v in payload.items() if isinstance(v, int)}
    try:
        error = cls(message, sqlstate=sqlstate, detail=detail, hint=hint)
    except TypeError:  # a subclass with its own constructor
        error = PiestreamError(message, sqlstate=sqlstate, detail=detail, hint=hint)
    for k in error.marker_fields:
        if isinstance(fields.get(k), str | int):
            setattr(error, k, fields[k])
    return error, where


def _error_classes() -> dict[str, type[PiestreamError]]:
    out: dict[str, type[PiestreamError]] = {}
    todo = [PiestreamError]
    while todo:
        cls = todo.pop()
        out[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return out


def error_summary(text: str) -> str:
    """`text` without any Python traceback or Java stack: what comes before a traceback, then the
    traceback's last line (the exception itself), on one line and at most a few hundred characters."""
    head, sep, trace = text.partition(_TRACEBACK)
    lines = [ln for ln in head.splitlines() if ln.strip() and not _JAVA_FRAME.match(ln)]
    if sep:
        # the exception line of the last traceback: the last line not indented (frames are)
        tail = [ln for ln in trace.splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
        tail = [ln for ln in tail if not ln.startswith(("During handling", "The above exception"))]
        if tail:
            lines.append(tail[-1])
    summary = " ".join(ln.strip() for ln in lines)
    summary = _MARKER.sub("", summary).strip()
    if len(summary) > _MAX_SUMMARY:
        summary = summary[: _MAX_SUMMARY - 3].rstrip() + "..."
    return summary or "unknown error"


def client_error(e: BaseException, context: str = "internal error") -> PiestreamError:
    """What a client may see of `e`: a PiestreamError whose message and detail hold no traceback.

    A PiestreamError stays as it is (its text cleaned if needed); a piestream error that crossed
    a process as a marker is rebuilt; anything else is a bug, reported as XX000 with `context`,
    the exception's class and the gist of its text. The full exception belongs in the server log."""
    if isinstance(e, PiestreamError):
        if not _needs_cleaning(e.message) and not _needs_cleaning(e.detail or ""):
            return e
        marked = parse_error_marker(e.message)
        if marked is not None:
            return marked[0]
        detail = error_summary(e.detail) if e.detail else None
        return type(e)._clean_copy(e, error_summary(e.message), detail)
    if isinstance(e, RecursionError):  # PostgreSQL's answer to a statement nested too deeply
        return StatementTooComplex("stack depth limit exceeded", hint="the statement nests too deeply")
    marked = parse_error_marker(str(e))
    if marked is not None:
        return marked[0]
    return InternalError(f"{context}: {type(e).__name__}: {error_summary(str(e))}")


def clean_text(text: str) -> str:
    """`text` as a client may see it: unchanged unless it holds a traceback or a marker."""
    return error_summary(text) if _needs_cleaning(text) else text


def _needs_cleaning(text: str) -> bool:
    return _TRACEBACK in text or "[piestream-error:" in text or "\n\tat " in text


# -- transactions ---------------------------------------------------------------------------------


class SerializationFailure(PiestreamError):
    """A transaction's writes overlap a concurrent commit (40001): retry the transaction."""

    sqlstate = "40001"


class ActiveSqlTransaction(PiestreamError):
    """A statement that cannot run inside a transaction block (25001)."""

    sqlstate = "25001"


class NoActiveSqlTransaction(PiestreamError):
    """A statement that needs a transaction block outside one (25P01)."""

    sqlstate = "25P01"


class ReadOnlySqlTransaction(PiestreamError):
    """A write inside a READ ONLY transaction (25006)."""

    sqlstate = "25006"


class InFailedSqlTransaction(PiestreamError):
    """A statement after an error inside a transaction block, before ROLLBACK (25P02)."""

    sqlstate = "25P02"


class InvalidSavepoint(PiestreamError):
    """RELEASE / ROLLBACK TO a savepoint that does not exist (3B001)."""

    sqlstate = "3B001"


class ProgramLimitExceeded(PiestreamError):
    """A configured limit was reached (54000), e.g. a transaction's write buffer."""

    sqlstate = "54000"


class LockNotAvailable(PiestreamError):
    """LOCK ... NOWAIT, or lock_timeout passed, while another session holds a conflicting lock (55P03)."""

    sqlstate = "55P03"


class DeadlockDetected(PiestreamError):
    """Two sessions wait for each other's table locks (40P01): this one's statement is aborted."""

    sqlstate = "40P01"


class QueryCanceled(PiestreamError):
    """The client cancelled the statement, or statement_timeout passed (57014)."""

    sqlstate = "57014"
