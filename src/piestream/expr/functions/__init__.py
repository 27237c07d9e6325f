"""Vectorized scalar functions with PostgreSQL semantics, one module per concept.

`registry` holds the name -> kernel table and evaluates FuncCalls; the other modules register
their kernels when first needed (`registry._load`). The public helpers re-exported here are
what the rest of piestream may call directly.
"""

from piestream.expr.functions.registry import (
    call_function,
    evaluate_call,
    is_registered,
    register,
    register_special,
)

__all__ = ["call_function", "evaluate_call", "is_registered", "register", "register_special"]
