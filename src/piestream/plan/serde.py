"""The versioned serialization of stream plans: fragments, their nodes and bound expressions as
JSON (DESIGN "Formats that must hold": plan nodes carry a format version, nothing is a pickle).

A document is ``{"format": PLAN_FORMAT, ...}``. Inside it every value is self-describing JSON:

- ``null``, booleans, integers, finite floats and strings are themselves; a tuple is an array;
- an object with an ``"@"`` key is a typed value: a registered dataclass (``{"@": "Project",
  <field>: <value>, ...}`` — every field by its name), an enum (``{"@": "JoinType", "v": ...}``),
  or a datum / descriptor that JSON has no word for (numeric, date, time, timestamp, interval,
  bytea, non-finite float, list, map, set, SQL type, schema, order, table descriptor).

The names after ``"@"`` are this module's registry (`DATACLASSES`, `ENUMS` and the stream node
kinds of `piestream.plan.node`), never Python module paths: moving or renaming a class does not
change the format, renaming a registered name or a field does (and needs a new format version
with a migration). Decoding rebuilds the objects through their constructors, so a node's own
checks run again on what is read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from piestream.common.errors import PiestreamError
from piestream.common.interval import Interval
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import DataType, Field, parse_type, type_text
from piestream.expr.expr import FuncCall, InputRef, Literal, UnknownLiteral
from piestream.expr.table_function import TableFunction
from piestream.expr.udf import PythonUdfCall
from piestream.expr.window import FrameBound, WindowFrame, WindowFunctionCall
from piestream.plan.agg_call import AggCall, AggKind
from piestream.plan.fragment import DispatchEdge, DispatchKind, Fragment
from piestream.plan.hash_agg import AggTables, DistinctTable, MaterializedInputTable
from piestream.plan.hash_join import IntervalBand, JoinType
from piestream.plan.materialize import ConflictBehavior
from piestream.plan.node import NODE_KINDS
from piestream.plan.numeric_rules import keep_decimal_rules
from piestream.plan.source import SourceLimits, SourceSpec
from piestream.plan.watermark import ColumnWatermark, WatermarkSource, WatermarkStep
from piestream.storage.table.desc import TableDesc

#: The plan format this build writes (and the newest it reads). Format 0 was pickles of the
#: executor modules' classes; `piestream.plan.legacy` reads it.
#: Format 2: SQL types are `type_text` (a plain NUMERIC may carry ``dscale N``); format 1 is read
#: (its types have no display scale) and a format-1 reader refuses format 2 by its number.
#: Format 3: watermarks (the WatermarkFilter node, `ColumnWatermark` fields on HashAgg and
#: HashJoin; older documents carry none: the fields' defaults), and NUMERIC with per-value scales
#: (issue 14): sum / avg state tables hold per-scale counts, results follow PostgreSQL's scales.
#: A plan of format <= 2 is loaded under the old NUMERIC rules
#: (`piestream.plan.numeric_rules.keep_decimal_rules`), so its view stays consistent with the rows
#: it already holds; AggCall's `decimal_rules` carries that into format 3 documents.
#: Format 4: schema evolution (ALTER TABLE ADD COLUMN): a dispatch edge may carry a subset of
#: its fragment's columns (`DispatchEdge.output_indices`) and a table descriptor may hold values
#: stored before columns were added (`TableDesc.value_required`, `ColumnDesc.missing`); a
#: format-3 reader would fail on them, so it refuses format 4 by its number.
PLAN_FORMAT = 4
#: the last format planned with decimal128(38, 10) NUMERIC
LAST_DECIMAL_NUMERIC_FORMAT = 2

#: Metadata key of a dataclass field added in a later format: left out of the document while it
#: holds its default, so plans that do not use it encode exactly as the earlier format did.
SINCE_FORMAT = "since_format"

#: The format's vocabulary besides the stream node kinds: registered name -> class.
DATACLASSES: dict[str, type] = {
    "Fragment": Fragment,
    "DispatchEdge": DispatchEdge,
    "InputRef": InputRef,
    "Literal": Literal,
    "UnknownLiteral": UnknownLiteral,
    "FuncCall": FuncCall,
    "PythonUdfCall": PythonUdfCall,
    "TableFunction": TableFunction,
    "WindowFunctionCall": WindowFunctionCall,
    "WindowFrame": WindowFrame,
    "FrameBound": FrameBound,
    "AggCall": AggCall,
    "AggTables": AggTables,
    "MaterializedInputTable": MaterializedInputTable,
    "DistinctTable": DistinctTable,
    "SourceSpec": SourceSpec,
    "SourceLimits": SourceLimits,
    "ColumnWatermark": ColumnWatermark,
    "WatermarkSource": WatermarkSource,
    "WatermarkStep": WatermarkStep,
    "IntervalBand": IntervalBand,
}
ENUMS: dict[str, type[enum.Enum]] = {
    "ConflictBehavior": ConflictBehavior,
    "JoinType": JoinType,
    "AggKind": AggKind,
    "DispatchKind": DispatchKind,
}


class PlanFormatError(PiestreamError):
    """A stored plan this build cannot read (written by a newer piestream, or damaged)."""

    sqlstate = "XX001"  # data_corrupted


def _registry() -> dict[str, type]:
    clash = set(DATACLASSES) & set(NODE_KINDS)
    if clash:
        raise PlanFormatError(f"plan type names registered twice: {sorted(clash)}")
    return {**DATACLASSES, **NODE_KINDS}


# every node kind has registered by now: importing this module imported the `piestream.plan` package
_BY_NAME = _registry()
_NAME_OF = {cls: name for name, cls in _BY_NAME.items()}
#: every dataclass a plan is made of (what `piestream.plan.numeric_rules` walks)
PLAN_CLASSES = frozenset(_BY_NAME.values())
_ENUM_NAME_OF = {cls: name for name, cls in ENUMS.items()}


# -- encoding ---------------------------------------------------------------------------------------


def to_json(v: Any) -> Any:
    """`v` as self-describing JSON data (see the module docstring)."""
    if isinstance(v, enum.Enum):  # before str / int: a StrEnum member is a str too
        name = _ENUM_NAME_OF.get(type(v))
        if name is None:
            raise PlanFormatError(f"cannot serialize enum {type(v).__name__} in a plan")
        return {"@": name, "v": v.value}
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"@": "float", "v": repr(v)}
    if isinstance(v, tuple):
        return [to_json(x) for x in v]
    encode = _ENCODERS.get(type(v))
    if encode is not None:
        return encode(v)
    name = _NAME_OF.get(type(v))
    if name is not None:
        out: dict[str, Any] = {"@": name}
        for f in dataclasses.fields(v):
            if f.init:
                value = getattr(v, f.name)
                if f.metadata.get(SINCE_FORMAT) and value == f.default:
                    continue  # a later field at its default: the document reads as it did before
                out[f.name] = to_json(value)
        return out
    raise PlanFormatError(f"cannot serialize {type(v).__name__} in a plan")


def _datetime(v: dt.datetime) -> dict[str, Any]:
    return {"@": "timestamptz" if v.tzinfo is not None else "timestamp", "v": v.isoformat()}


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    decimal.Decimal: lambda v: {"@": "numeric", "v": str(v)},
    dt.date: lambda v: {"@": "date", "v": v.isoformat()},
    dt.time: lambda v: {"@": "time", "v": v.isoformat()},
    dt.datetime: _datetime,
    Interval: lambda v: {"@": "interval", "v": [v.months, v.days, v.usecs]},
    bytes: lambda v: {"@": "bytea", "v": v.hex()},
    list: lambda v: {"@": "list", "v": [to_json(x) for x in v]},
    dict: lambda v: {"@": "map", "v": [[str(k), to_json(x)] for k, x in v.items()]},
    frozenset: lambda v: {"@": "set", "v": sorted(to_json(x) for x in v)},
    DataType: lambda v: {"@": "type", "v": type_text(v)},
    Schema: lambda v: {"@": "schema", "v": [[f.name, type_text(f.data_type)] for f in v.fields]},
    OrderType: lambda v: {"@": "order", "v": [v.descending, v.nulls_largest]},
    TableDesc: lambda v: {"@": "table", "v": v.to_json()},
}


# -- decoding ---------------------------------------------------------------------------------------

_DECODERS: dict[str, Callable[[Any], Any]] = {
    "float": float,
    "numeric": decimal.Decimal,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timestamp": dt.datetime.fromisoformat,
    "timestamptz": dt.datetime.fromisoformat,
    "interval": lambda v: Interval(*v),
    "bytea": bytes.fromhex,
    "list": lambda v: [from_json(x) for x in v],
    "map": lambda v: {k: from_json(x) for k, x in v},
    "set": lambda v: frozenset(from_json(x) for x in v),
    "type": parse_type,
    "schema": lambda v: Schema(tuple(Field(n, parse_type(t)) for n, t in v)),
    "order": lambda v: OrderType(*v),
    "table": TableDesc.from_json,
}


def from_json(d: Any) -> Any:
    """The value `to_json` encoded."""
    if d is None or isinstance(d, bool | int | float | str):
        return d
    if isinstance(d, list):
        return tuple(from_json(x) for x in d)
    if not isinstance(d, dict) or "@" not in d:
        raise PlanFormatError(f"unexpected value in a stored plan: {str(d)[:80]}")
    tag = d["@"]
    decode = _DECODERS.get(tag)
    if decode is not None:
        return decode(d["v"])
    enum_cls = ENUMS.get(tag)
    if enum_cls is not None:
        return enum_cls(d["v"])
    cls = _BY_NAME.get(tag)
    if cls is None:
        raise PlanFormatError(f"unknown type {tag!r} in a stored plan")
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(d) - fields - {"@"}
    if unknown:
        raise PlanFormatError(f"{tag} in a stored plan has unknown fields {sorted(unknown)}")
    return cls(**{k: from_json(v) for k, v in d.items() if k != "@"})


# -- documents --------------------------------------------------------------------------------------


def encode_fragments(fragments: list[Fragment]) -> str:
    """A job's fragments as one versioned JSON document (what meta stores)."""
    return json.dumps({"format": PLAN_FORMAT, "fragments": [to_json(f) for f in fragments]})


def decode_fragments(text: str | bytes) -> list[Fragment]:
    doc = _document(text)
    frags = [from_json(f) for f in doc["fragments"]]
    if doc["format"] <= LAST_DECIMAL_NUMERIC_FORMAT:
        frags = keep_decimal_rules(frags)
    return frags


def encode_fragment(fragment: Fragment) -> bytes:
    """One fragment as bytes (what an epoch ships to its tasks)."""
    return json.dumps({"format": PLAN_FORMAT, "fragment": to_json(fragment)}).encode()


def decode_fragment(data: bytes) -> Fragment:
    doc = _document(data)
    f = from_json(doc["fragment"])
    if doc["format"] <= LAST_DECIMAL_NUMERIC_FORMAT:
        f = keep_decimal_rules(f)
    assert isinstance(f, Fragment)
    return f


def _document(text: str | bytes) -> Mapping[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PlanFormatError(f"a stored plan is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("format"), int):
        raise PlanFormatError("a stored plan has no format version")
    if doc["format"] > PLAN_FORMAT:
        raise PlanFormatError(
            f"a stored plan has format {doc['format']}; this piestream reads plan formats up to "
            f"{PLAN_FORMAT}",
            hint="Open the data directory with the newer piestream that wrote it.",
        )
    return doc
