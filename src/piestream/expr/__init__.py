"""piestream.expr: typed expressions with PostgreSQL semantics, evaluated over Arrow columns.

* `expr` -- the tree (Expr, InputRef, Literal, UnknownLiteral, FuncCall);
* `bind` -- what the binder calls: literal, cast, coerce_to, bind_call, common_type,
  agg_signature, fold_constants, eval_non_strict;
* `coercion`, `resolve`, `signatures` -- PostgreSQL's type rules and overload resolution;
* `functions` -- the vectorized kernels, one module per concept.
"""

from piestream.expr.agg import agg_signature
from piestream.expr.bind import (
    UnknownLiteral,
    bind_call,
    cast,
    coerce_to,
    common_type,
    eval_non_strict,
    fold_constants,
    literal,
)
from piestream.expr.coercion import CastContext, type_name
from piestream.expr.evaluate import bind_statement_time
from piestream.expr.expr import Expr, FuncCall, InputRef, Literal, constant_array, eval_exprs
from piestream.expr.functions.datetime import statement_time

__all__ = [
    "CastContext",
    "Expr",
    "FuncCall",
    "InputRef",
    "Literal",
    "UnknownLiteral",
    "agg_signature",
    "bind_call",
    "bind_statement_time",
    "cast",
    "coerce_to",
    "common_type",
    "constant_array",
    "eval_exprs",
    "eval_non_strict",
    "fold_constants",
    "literal",
    "statement_time",
    "type_name",
]
