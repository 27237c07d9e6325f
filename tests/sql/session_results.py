"""Helpers the SQL tests share: a statement's rows in a stable order, and its error."""

from __future__ import annotations

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
