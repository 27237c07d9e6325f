"""The catalog of monomorphic operator and function signatures (PostgreSQL's pg_operator /
pg_proc entries piestream implements), used by overload resolution.

Polymorphic and variadic functions (CASE, COALESCE, IN, ||, concat, arrays, struct fields, ...)
have their own binders in `bind_special`; everything else is listed here as
``name -> [Signature(arg types, return type, kernel name)]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piestream.common.types import (
    BIGINT,
    BOOLEAN,
    BYTEA,
    DATE,
    DOUBLE,
    INT,
    INTERVAL,
    JSONB,
    NUMERIC,
    REAL,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    VARCHAR,
    DataType,
    list_of,
)


@dataclass(frozen=True)
class Signature:
    args: tuple[DataType, ...]
    ret: DataType
    impl: str


CATALOG: dict[str, list[Signature]] = {}

#: Operator spellings (error messages say "operator does not exist: a + b" for these).
OPERATORS = {
    "+": "add",
    "-": "subtract",
    "*": "multiply",
    "/": "divide",
    "%": "modulus",
    "^": "power",
    "=": "equal",
    "<>": "not_equal",
    "!=": "not_equal",
    "<": "less_than",
    "<=": "less_than_or_equal",
    ">": "greater_than",
    ">=": "greater_than_or_equal",
    "~~": "like",
    "~~*": "ilike",
    "!~~": "not_like",
    "!~~*": "not_ilike",
}

#: jsonb's operators (jsonb_ops), by the kernel each overload names below.
JSONB_OPERATORS = ("->", "->>", "#>", "#>>", "@>", "<@", "?", "?|", "?&", "#-")
OPERATORS.update({op: op for op in JSONB_OPERATORS})

#: Names shown as operators in messages ("operator does not exist: integer || integer").
OPERATOR_SYMBOLS = frozenset({*OPERATORS, "||"})

#: Other names accepted for a function (SQL spellings, PostgreSQL aliases).
ALIASES = {
    "ceiling": "ceil",
    "pow": "power",
    "length": "char_length",
    "character_length": "char_length",
    "substring": "substr",
    "position": "strpos",
    "trim": "btrim",
    "log": "log10",
    "current_timestamp": "now",
    # names sqlglot gives PostgreSQL functions (exp.Func.sql_name), same argument order
    "str_position": "strpos",
    "time_to_str": "to_char",
    "unix_to_time": "to_timestamp",
    "array_size": "array_length",
    "array_concat": "array_cat",
    "uuid": "gen_random_uuid",
    "rand": "random",
    "transaction_timestamp": "now",
    "statement_timestamp": "now",
    "!=": "<>",
    "neg": "-",
    "equal": "=",
    "not_equal": "<>",
    "less_than": "<",
    "less_than_or_equal": "<=",
    "greater_than": ">",
    "greater_than_or_equal": ">=",
    "add": "+",
    "subtract": "-",
    "multiply": "*",
    "divide": "/",
    "modulus": "%",
}


def _add(name: str, args: Sequence[DataType], ret: DataType, impl: str | None = None) -> None:
    CATALOG.setdefault(name, []).append(Signature(tuple(args), ret, impl or name))


NUMS = (SMALLINT, INT, BIGINT, NUMERIC, REAL, DOUBLE)
SCALARS = (BOOLEAN, *NUMS, VARCHAR, BYTEA, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, JSONB)
_TS = (TIMESTAMP, TIMESTAMPTZ)

# -- arithmetic -----------------------------------------------------------------------------------
for _op in ("+", "-", "*", "/"):
    _impl = OPERATORS[_op]
    for _t in NUMS:
        _add(_op, (_t, _t), _t, _impl)
    _add(_op, (REAL, DOUBLE), DOUBLE, _impl)  # float48 / float84 operators
    _add(_op, (DOUBLE, REAL), DOUBLE, _impl)
for _t in (SMALLINT, INT, BIGINT, NUMERIC):
    _add("%", (_t, _t), _t, "modulus")
    _add("mod", (_t, _t), _t, "modulus")
_add("^", (DOUBLE, DOUBLE), DOUBLE, "power")
_add("^", (NUMERIC, NUMERIC), NUMERIC, "power")
for _t in (*NUMS, INTERVAL):
    _add("-", (_t,), _t, "neg")

# date / time arithmetic
_add("+", (DATE, INT), DATE, "add")
_add("+", (INT, DATE), DATE, "add")
_add("-", (DATE, INT), DATE, "subtract")
_add("-", (DATE, DATE), INT, "subtract")
_add("+", (DATE, INTERVAL), TIMESTAMP, "add")
_add("+", (INTERVAL, DATE), TIMESTAMP, "add")
_add("-", (DATE, INTERVAL), TIMESTAMP, "subtract")
_add("+", (DATE, TIME), TIMESTAMP, "add")
_add("+", (TIME, DATE), TIMESTAMP, "add")
for _t in _TS:
    _add("+", (_t, INTERVAL), _t, "add")
    _add("+", (INTERVAL, _t), _t, "add")
    _add("-", (_t, INTERVAL), _t, "subtract")
    _add("-", (_t, _t), INTERVAL, "subtract")
_add("+", (TIME, INTERVAL), TIME, "add")
_add("+", (INTERVAL, TIME), TIME, "add")
_add("-", (TIME, INTERVAL), TIME, "subtract")
_add("-", (TIME, TIME), INTERVAL, "subtract")
_add("+", (INTERVAL, INTERVAL), INTERVAL, "add")
_add("-", (INTERVAL, INTERVAL), INTERVAL, "subtract")
_add("*", (INTERVAL, DOUBLE), INTERVAL, "multiply")
_add("*", (DOUBLE, INTERVAL), INTERVAL, "multiply")
_add("/", (INTERVAL, DOUBLE), INTERVAL, "divide")

# -- comparison -----------------------------------------------------------------------------------
for _op in ("=", "<>", "<", "<=", ">", ">="):
    for _t in SCALARS:
        _add(_op, (_t, _t), BOOLEAN, OPERATORS[_op])
    _add(_op, (REAL, DOUBLE), BOOLEAN, OPERATORS[_op])
    _add(_op, (DOUBLE, REAL), BOOLEAN, OPERATORS[_op])

# -- strings --------------------------------------------------------------------------------------
for _op in ("like", "ilike", "not_like", "not_ilike"):
    _add(_op, (VARCHAR, VARCHAR), BOOLEAN)
for _src, _dst in OPERATORS.items():
    if _dst in ("like", "ilike", "not_like", "not_ilike"):
        _add(_src, (VARCHAR, VARCHAR), BOOLEAN, _dst)
for _name in ("lower", "upper", "initcap", "reverse", "md5"):
    _add(_name, (VARCHAR,), VARCHAR)
_add("md5", (BYTEA,), VARCHAR)
_add("char_length", (VARCHAR,), INT)
_add("char_length", (BYTEA,), INT)
_add("octet_length", (VARCHAR,), INT)
_add("octet_length", (BYTEA,), INT)
_add("substr", (VARCHAR, INT), VARCHAR)
_add("substr", (VARCHAR, INT, INT), VARCHAR)
for _name in ("btrim", "ltrim", "rtrim"):
    _add(_name, (VARCHAR,), VARCHAR)
    _add(_name, (VARCHAR, VARCHAR), VARCHAR)
_add("split_part", (VARCHAR, VARCHAR, INT), VARCHAR)
_add("replace", (VARCHAR, VARCHAR, VARCHAR), VARCHAR)
_add("strpos", (VARCHAR, VARCHAR), INT)
_add("left", (VARCHAR, INT), VARCHAR)
_add("right", (VARCHAR, INT), VARCHAR)
_add("repeat", (VARCHAR, INT), VARCHAR)
for _name in ("lpad", "rpad"):
    _add(_name, (VARCHAR, INT), VARCHAR)
    _add(_name, (VARCHAR, INT, VARCHAR), VARCHAR)
_add("starts_with", (VARCHAR, VARCHAR), BOOLEAN)
_add("ascii", (VARCHAR,), INT)
_add("chr", (INT,), VARCHAR)
_add("regexp_match", (VARCHAR, VARCHAR), list_of(VARCHAR))
_add("regexp_match", (VARCHAR, VARCHAR, VARCHAR), list_of(VARCHAR))
_add("regexp_replace", (VARCHAR, VARCHAR, VARCHAR), VARCHAR)
_add("regexp_replace", (VARCHAR, VARCHAR, VARCHAR, VARCHAR), VARCHAR)
_add("regexp_count", (VARCHAR, VARCHAR), INT)
_add("regexp_count", (VARCHAR, VARCHAR, INT), INT)
_add("regexp_count", (VARCHAR, VARCHAR, INT, VARCHAR), INT)
_add("regexp_like", (VARCHAR, VARCHAR), BOOLEAN)
_add("regexp_like", (VARCHAR, VARCHAR, VARCHAR), BOOLEAN)

# -- math -----------------------------------------------------------------------------------------
for _t in NUMS:
    _add("abs", (_t,), _t)
for _name in ("round", "trunc", "floor", "ceil", "sign", "sqrt", "exp", "ln", "log10"):
    _add(_name, (DOUBLE,), DOUBLE)
    _add(_name, (NUMERIC,), NUMERIC)
_add("round", (NUMERIC, INT), NUMERIC)
_add("trunc", (NUMERIC, INT), NUMERIC)
_add("power", (DOUBLE, DOUBLE), DOUBLE)
_add("power", (NUMERIC, NUMERIC), NUMERIC)
for _name in ("cbrt", "sin", "cos", "tan", "asin", "acos", "atan", "degrees", "radians"):
    _add(_name, (DOUBLE,), DOUBLE)
_add("atan2", (DOUBLE, DOUBLE), DOUBLE)
_add("pi", (), DOUBLE)

# -- date / time ----------------------------------------------------------------------------------
for _t in (DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL):
    _add("extract", (VARCHAR, _t), NUMERIC)
    if _t is not DATE:
        _add("date_part", (VARCHAR, _t), DOUBLE)
for _t in (TIMESTAMP, TIMESTAMPTZ, INTERVAL):
    _add("date_trunc", (VARCHAR, _t), _t)
for _t in _TS:
    _add("to_char", (_t, VARCHAR), VARCHAR)
_add("make_date", (INT, INT, INT), DATE)
_add("make_timestamp", (INT, INT, INT, INT, INT, DOUBLE), TIMESTAMP)
_add("to_timestamp", (DOUBLE,), TIMESTAMPTZ)
_add("now", (), TIMESTAMPTZ)
_add("proctime", (), TIMESTAMPTZ)  # only planned above a source (`frontend.source_spec`)
_add("gen_random_uuid", (), VARCHAR)  # its text form: piestream has no uuid type
_add("random", (), DOUBLE)
for _name in ("tumble_start", "tumble_end"):
    _add(_name, (DATE, INTERVAL), TIMESTAMP)
    _add(_name, (DATE, INTERVAL, INTERVAL), TIMESTAMP)
    for _t in _TS:
        _add(_name, (_t, INTERVAL), _t)
        _add(_name, (_t, INTERVAL, INTERVAL), _t)

# -- jsonb ----------------------------------------------------------------------------------------
_TEXTS = list_of(VARCHAR)
_add("->", (JSONB, VARCHAR), JSONB, "jsonb_access")
_add("->", (JSONB, INT), JSONB, "jsonb_access")
_add("->>", (JSONB, VARCHAR), VARCHAR, "jsonb_access_text")
_add("->>", (JSONB, INT), VARCHAR, "jsonb_access_text")
_add("#>", (JSONB, _TEXTS), JSONB, "jsonb_extract_path")
_add("#>>", (JSONB, _TEXTS), VARCHAR, "jsonb_extract_path_text")
_add("@>", (JSONB, JSONB), BOOLEAN, "jsonb_contains")
_add("<@", (JSONB, JSONB), BOOLEAN, "jsonb_contained")
_add("?", (JSONB, VARCHAR), BOOLEAN, "jsonb_exists")
_add("?|", (JSONB, _TEXTS), BOOLEAN, "jsonb_exists_any")
_add("?&", (JSONB, _TEXTS), BOOLEAN, "jsonb_exists_all")
_add("-", (JSONB, VARCHAR), JSONB, "jsonb_delete")
_add("-", (JSONB, INT), JSONB, "jsonb_delete_index")
_add("-", (JSONB, _TEXTS), JSONB, "jsonb_delete_keys")
_add("#-", (JSONB, _TEXTS), JSONB, "jsonb_delete_path")
_add("jsonb_typeof", (JSONB,), VARCHAR)
_add("jsonb_array_length", (JSONB,), INT)
_add("jsonb_strip_nulls", (JSONB,), JSONB)
_add("jsonb_set", (JSONB, _TEXTS, JSONB), JSONB)
_add("jsonb_set", (JSONB, _TEXTS, JSONB, BOOLEAN), JSONB, "jsonb_set_create")

#: Functions whose value changes between evaluations: never constant-folded.
VOLATILE = frozenset({"now", "proctime"})
#: Functions with a new value per row (never frozen per statement, never folded).
PER_ROW = frozenset({"gen_random_uuid", "random"})
