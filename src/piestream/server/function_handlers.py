"""Handlers of CREATE FUNCTION and DROP FUNCTION.

A function is checked before it is stored: a SQL body is bound over its parameters (so a typo
fails at CREATE, not in the first MV using it), a Python body is compiled. The catalog keeps the
source text (`FunctionCatalog`), never a Python object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateFunction,
    FeatureNotSupported,
    PiestreamError,
    UndefinedFunction,
)
from piestream.common.types import DataType
from piestream.expr.bind import canonical_name
from piestream.expr.coercion import type_name
from piestream.expr.functions.registry import is_registered
from piestream.expr.signatures import CATALOG
from piestream.expr.udf import compile_function
from piestream.frontend.binder.expr_binder import AGG_NAMES
from piestream.frontend.binder.user_functions import bind_body, callers_of, functions_of
from piestream.frontend.catalog import DEFAULT_SCHEMA, CatalogReader, FunctionCatalog
from piestream.frontend.parser import ast
from piestream.server.results import QueryResult, command
from piestream.server.sink_publisher import discard_staging

if TYPE_CHECKING:
    from piestream.server.session import Session

LANGUAGES = ("sql", "python")


def _unqualified(name: str) -> str:
    schema, _, base = name.rpartition(".")
    if schema and schema != DEFAULT_SCHEMA:
        raise FeatureNotSupported(f'schema "{schema}" is not supported; functions live in "{DEFAULT_SCHEMA}"')
    return base


def _is_builtin(name: str) -> bool:
    from piestream.expr.bind_special import SPECIAL_BINDERS

    key = canonical_name(name)
    return key in CATALOG or key in SPECIAL_BINDERS or name in AGG_NAMES or is_registered(key)


def signature_text(name: str, types: Sequence[DataType]) -> str:
    return f"{name}({', '.join(type_name(t) for t in types)})"


def create_function(s: Session, stmt: ast.CreateFunction, params: Sequence[Any] = ()) -> QueryResult:
    name = _unqualified(stmt.name)
    if stmt.language not in LANGUAGES:
        raise FeatureNotSupported(
            f"LANGUAGE {stmt.language} is not supported", hint="Functions are written in SQL or Python."
        )
    if _is_builtin(name):
        raise FeatureNotSupported(
            f"a user-defined function named like the built-in function {name} is not supported"
        )
    options = {k.lower(): v.lower() for k, v in stmt.with_options.items()}
    vectorized = options.pop("vectorized", "false") in ("true", "on", "1", "yes")
    if options:
        raise PiestreamError(f'unrecognized function option "{next(iter(options))}"', sqlstate="22023")
    if vectorized and stmt.language != "python":
        raise PiestreamError("only Python functions can be vectorized", sqlstate="22023")
    types = tuple(a.type for a in stmt.args)
    with s.db.ddl.lock:
        snapshot = s.db.catalog.snapshot()
        existing = next((f for f in snapshot.functions_named(name) if f.arg_types == types), None)
        if existing is not None:
            if not stmt.or_replace:
                raise DuplicateFunction(
                    f"function {signature_text(name, types)} already exists with same argument types"
                )
            callers = callers_of(snapshot, s.db.catalog.functions(), {existing.id})
            if callers and stmt.return_type != existing.return_type:
                raise PiestreamError(
                    "cannot change return type of existing function",
                    sqlstate="42P13",
                    detail=f"function {callers[0].signature} calls it",
                    hint=f"Use DROP FUNCTION {existing.signature} first.",
                )
            users = s.db.catalog.dependents(existing.id)
            if users:
                raise FeatureNotSupported(
                    f"replacing function {existing.signature} used by {users[0].kind.value} {users[0].name} "
                    "is not supported",
                    hint="Drop the objects using it first.",
                )
        fn = FunctionCatalog(
            id=s.db.ddl.next_object_id(),
            name=name,
            arg_names=tuple(a.name for a in stmt.args),
            arg_types=types,
            return_type=stmt.return_type,
            language=stmt.language,
            body=stmt.body,
            definition=stmt.text,
            strict=stmt.strict,
            vectorized=vectorized,
        )
        if fn.language == "python":
            compile_function(fn.name, fn.body)
        else:
            with functions_of(snapshot, set()):
                bind_body(fn)
        s.db.catalog.create_function(fn, replaces=existing)
    return command("CREATE FUNCTION")


def drop_function(s: Session, stmt: ast.DropFunction, params: Sequence[Any] = ()) -> QueryResult:
    res = command("DROP FUNCTION")
    with s.db.ddl.lock:
        snapshot = s.db.catalog.snapshot()
        targets: list[FunctionCatalog] = []
        for qualified, types in stmt.targets:
            name = _unqualified(qualified)
            cands = snapshot.functions_named(name)
            if types is not None:
                cands = [f for f in cands if list(f.arg_types) == types]
            shown = name if types is None else signature_text(name, types)
            if not cands:
                if stmt.if_exists:
                    res.notices.append(f"function {shown} does not exist, skipping")
                    continue
                raise UndefinedFunction(f"function {shown} does not exist")
            if len(cands) > 1:
                raise UndefinedFunction(
                    f'function name "{name}" is not unique',
                    sqlstate="42725",
                    hint="Specify the argument list to select the function unambiguously.",
                )
            targets.append(cands[0])
        callers = _callers(s, snapshot, targets)
        if callers and not stmt.cascade:
            fn, caller = callers[0]
            raise _still_used(fn, f"function {caller.signature}")
        for _, caller in callers:  # CASCADE: the calling functions go too, and what uses them
            if all(caller.id != t.id for t in targets):
                targets.append(caller)
                res.notices.append(f"drop cascades to function {caller.signature}")
        dependents = [(fn, r) for fn in targets for r in s.db.catalog.dependents(fn.id)]
        if dependents and not stmt.cascade:
            fn, r = dependents[0]
            raise _still_used(fn, f"{r.kind.value} {r.name}")
        if dependents:
            dropped = s.db.ddl.drop(list({r.id: r for _, r in dependents}.values()), cascade=True)
            discard_staging(s.db.data_dir, dropped)
        s.db.catalog.drop_functions(targets)
    return res


def _still_used(fn: FunctionCatalog, user: str) -> DependentObjectsStillExist:
    return DependentObjectsStillExist(
        f"cannot drop function {fn.signature} because other objects depend on it",
        detail=f"{user} depends on function {fn.signature}",
        hint="Use DROP ... CASCADE to drop the dependent objects too.",
    )


def _callers(
    s: Session, snapshot: CatalogReader, targets: list[FunctionCatalog]
) -> list[tuple[FunctionCatalog, FunctionCatalog]]:
    """(callee, caller) for every function calling one of `targets`, directly or through
    another caller, so CASCADE takes the whole chain."""
    everything = s.db.catalog.functions()
    found: list[tuple[FunctionCatalog, FunctionCatalog]] = []
    ids = {t.id for t in targets}
    frontier = list(targets)
    while frontier:
        fn = frontier.pop()
        for caller in callers_of(snapshot, everything, {fn.id}):
            if caller.id not in ids:
                ids.add(caller.id)
                found.append((fn, caller))
                frontier.append(caller)
    return found
