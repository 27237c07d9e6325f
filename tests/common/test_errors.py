"""Errors crossing processes (the marker) and what a client may see of any exception."""

from __future__ import annotations

import traceback

from piestream.common.errors import (
    DivisionByZero,
    InternalError,
    InvalidInput,
    PiestreamError,
    clean_text,
    client_error,
    error_marker,
    error_summary,
    parse_error_marker,
)
from piestream.runtime.exchange import ActorFailed
from piestream.runtime.runners import epoch_error


def _traceback_text(e: BaseException) -> str:
    return "".join(traceback.format_exception(e))


def _raise_chained() -> None:
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError as e:
        raise DivisionByZero("division by zero", hint="check the divisor") from e


def test_marker_round_trips_class_sqlstate_message_detail_hint_and_context() -> None:
    e = InvalidInput('invalid input syntax for type integer: "x"', detail="line\n2", hint="cast it")
    text = (
        f"Traceback (most recent call last):\n  File ...\nActorFailed: boom {error_marker(e, actor_id=7)}\n"
    )
    parsed = parse_error_marker(text)
    assert parsed is not None
    got, where = parsed
    assert type(got) is InvalidInput and got.sqlstate == "22P02"
    assert (got.message, got.detail, got.hint) == (e.message, e.detail, e.hint)
    assert where == {"actor_id": 7}
    # the last marker wins (Spark prints the most recent failure last); garbage is no marker
    later = error_marker(DivisionByZero("division by zero"))
    parsed = parse_error_marker(text + later)
    assert parsed is not None and type(parsed[0]) is DivisionByZero
    assert parse_error_marker("[piestream-error:bm90IGpzb24=]") is None
    assert parse_error_marker("no marker here") is None


def test_spark_style_worker_failure_becomes_the_cause_without_traceback() -> None:
    """The driver gets a worker's ActorFailed as text (PythonException); epoch_error rebuilds it."""
    try:
        try:
            _raise_chained()
        except DivisionByZero as e:
            raise ActorFailed(e, fragment_id=3, actor_id=3 << 16) from e
    except ActorFailed as failed:
        worker_text = "An exception was thrown from the Python worker:\n" + _traceback_text(failed)
    assert "Traceback" in worker_text

    class PythonException(Exception):  # what pyspark raises on the driver: text only
        pass

    err, fragment = epoch_error(PythonException(worker_text))
    assert type(err) is DivisionByZero and err.sqlstate == "22012"
    assert err.message == "division by zero" and err.hint == "check the divisor"
    assert fragment == 3
    # in-process (LocalRunner) the ActorFailed itself arrives
    err2, fragment2 = epoch_error(ActorFailed(DivisionByZero("division by zero"), 4, 9))
    assert err2.sqlstate == "22012" and fragment2 == 4


def test_bugs_become_internal_errors_with_one_readable_line() -> None:
    try:
        {}["missing"]
    except KeyError as e:
        err = client_error(e)
    assert isinstance(err, InternalError) and err.sqlstate == "XX000"
    assert err.message == "internal error: KeyError: 'missing'"
    java = (
        "An error occurred while calling o41.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: lost executor\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)\n"
        "\t... 12 more\n"
    )
    err, fragment = epoch_error(RuntimeError(java))
    assert err.sqlstate == "XX000" and fragment is None
    assert "\n" not in err.message and "DAGScheduler.scala" not in err.message
    assert err.message.startswith("streaming epoch failed: RuntimeError: An error occurred")
    assert "lost executor" in err.message


def test_summary_keeps_the_exception_line_of_a_traceback() -> None:
    try:
        _raise_chained()
    except DivisionByZero as e:
        text = "worker failed:\n" + _traceback_text(e)
    s = error_summary(text)
    assert "Traceback" not in s and "File " not in s
    assert s == "worker failed: piestream.common.errors.DivisionByZero: division by zero"
    assert len(error_summary("x" * 5000)) <= 400
    assert clean_text("plain message\nwith two lines") == "plain message\nwith two lines"


def test_a_piestream_error_whose_text_holds_a_traceback_is_cleaned() -> None:
    dirty = PiestreamError("epoch failed: Traceback (most recent call last):\n  File x\nValueError: bad")
    clean = client_error(dirty)
    assert clean.message == "epoch failed: ValueError: bad" and clean.sqlstate == "XX000"
    ok = InvalidInput("fine")
    assert client_error(ok) is ok
