"""Helpers the SQL tests share: a statement's rows in a stable order, and its error."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from piestream.common.errors import PiestreamError
from piestream.server.session import Session


def rows(s: Session, sql: str) -> list[tuple[Any, ...]]:
    """The last result's rows, sorted by their repr (an order for any mix of types)."""
    return sorted(s.execute(sql)[-1].rows, key=repr)


def error(s: Session, sql: str) -> PiestreamError:
    """The error `sql` raises (the test fails if it raises none)."""
    with pytest.raises(PiestreamError) as info:
        s.execute(sql)
    return info.value


def all_fail(s: Session, statements: Iterable[str], sqlstate: str, message_part: str) -> None:
    """Each statement fails with `sqlstate` and a message containing `message_part`."""
    for sql in statements:
        e = error(s, sql)
        assert e.sqlstate == sqlstate, sql
        assert message_part in str(e), sql
