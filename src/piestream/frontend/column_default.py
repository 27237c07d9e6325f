"""Column DEFAULTs of CREATE TABLE: RisingWave's forms, a constant expression (folded once, at
CREATE) or ``now()`` / ``CURRENT_TIMESTAMP`` (evaluated when a row is inserted). Anything else
is 0A000 naming the expression: a per-row or column-reading default would need per-row
evaluation that INSERT, COPY and `Connection.insert` do not do."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from piestream.common.chunk import DataChunk
from piestream.common.errors import FeatureNotSupported
from piestream.common.scalar import Datum, from_arrow
from piestream.common.text import format_datum
from piestream.common.types import NUMERIC_KINDS, DataType, TypeKind
from piestream.expr.bind import cast
from piestream.expr.coercion import type_name
from piestream.expr.evaluate import fold_constants
from piestream.expr.expr import Expr, Literal
from piestream.frontend.binder.expr_binder import ExprBinder
from piestream.frontend.binder.scope import Scope
from piestream.frontend.catalog import ColumnCatalog

#: the non-constant DEFAULTs taken, as stored (and as pg_attrdef shows them)
NOW_DEFAULT = "now()"


@dataclass(frozen=True)
class ColumnDefault:
    """A bound DEFAULT: the constant `value`, or `expr` (its SQL) evaluated at each insert."""

    value: Datum = None
    expr: str | None = None


def bind_column_default(node: exp.Expression, t: DataType, column: str) -> ColumnDefault:
    """`node` (a column's DEFAULT) assigned to `t` (PostgreSQL's assignment cast, checked now)."""
    bound = cast(ExprBinder(Scope(), context="DEFAULT").bind(node), t, explicit=False)
    value = fold_constants(bound)
    if isinstance(value, Literal):
        return ColumnDefault(value=value.value)
    if isinstance(node, exp.CurrentTimestamp) and not node.args:
        return ColumnDefault(expr=NOW_DEFAULT)  # both spellings parse as this node
    raise FeatureNotSupported(
        f'DEFAULT {node.sql(dialect="postgres")} for column "{column}" is not supported: '
        "a DEFAULT is a constant expression or now()"
    )


_SCALAR_NAMES = frozenset(TypeKind) - {TypeKind.STRUCT, TypeKind.LIST, TypeKind.SERIAL}


def default_text(c: ColumnCatalog) -> str | None:
    """A column's DEFAULT as PostgreSQL shows it (pg_get_expr of pg_attrdef.adbin): a
    non-negative number as is (``7``, ``1.5``), a boolean as ``true``, anything else as a typed
    literal (``'x'::character varying``, ``'-5'::integer``), ``now()``; None: no DEFAULT."""
    if c.default_expr is not None:
        return c.default_expr
    if c.default is None:
        return None
    kind = c.data_type.kind
    if kind is TypeKind.BOOLEAN:
        return "true" if c.default else "false"
    text = format_datum(c.default, c.data_type)
    if kind in NUMERIC_KINDS and text[:1].isdigit():
        return text
    # format_type's name (piestream's varchar is PostgreSQL's unbounded character varying)
    name = kind.value if kind in _SCALAR_NAMES else type_name(c.data_type)
    return "'" + text.replace("'", "''") + "'::" + name


def default_ast(c: ColumnCatalog) -> exp.Expression:
    """`c`'s DEFAULT as an expression tree (``DEFAULT`` in an INSERT's VALUES); NULL for none."""
    text = default_text(c)
    if text is None:
        return exp.Null()
    if text == NOW_DEFAULT:
        return exp.CurrentTimestamp()
    return sqlglot.parse_one(text, read="postgres")  # type: ignore[return-value]


def default_expr(text: str, t: DataType) -> Expr:
    """A stored non-constant DEFAULT bound again, assigned to the column type `t`."""
    if text != NOW_DEFAULT:  # only what bind_column_default stores
        raise FeatureNotSupported(f"DEFAULT {text} is not supported")
    return cast(ExprBinder(Scope(), context="DEFAULT").bind(exp.CurrentTimestamp()), t, explicit=False)


def evaluate_default(text: str, t: DataType) -> Datum:
    """The value of a stored non-constant DEFAULT now (one value per statement, as ``now()``)."""
    e = default_expr(text, t)
    return from_arrow(e.eval(DataChunk([], length=1)), t)[0]
