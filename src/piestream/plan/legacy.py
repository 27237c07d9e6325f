"""Reading plan format 0: the fragments data directories held before plans became versioned data.

Format 0 stored a job's fragments as a Python pickle of the executor modules' classes (e.g.
``piestream.stream.executors.project.ProjectNode``), so it could only be read by code that still
had those modules. This reader does not import them: a restricted unpickler turns every
piestream (and pyarrow) object into a neutral `Format0Object` — its old class name plus its
state — and refuses anything else; `convert` then rebuilds today's classes from those records by
class name and field name. Cached values a format-0 object carried in its state (an Arrow type a
`DataType` had computed, ...) are ignored: only declared fields are read.

Two node kinds changed shape: a format-0 source node held a connector reader object, a sink node
a writer object. Their conversion asks the caller (`SourceSpecOf`, `SinkOptionsOf`), who knows
the catalog, for the connector spec and options the new nodes hold instead.
"""

from __future__ import annotations

import copyreg
import dataclasses
import datetime as dt
import decimal
import enum
import io
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from piestream.common.interval import Interval
from piestream.common.order import OrderType
from piestream.common.schema import Schema
from piestream.common.types import DataType, Field, TypeKind
from piestream.plan.fragment import Fragment
from piestream.plan.node import NODE_KINDS
from piestream.plan.serde import DATACLASSES, ENUMS, PlanFormatError
from piestream.plan.sink import SinkNode
from piestream.plan.source import SourceLimits, SourceNode, SourceSpec
from piestream.storage.table.desc import ColumnDesc, TableDesc

#: The first bytes of a format-0 job record (pickle protocol 2..5).
FORMAT0_MAGIC = b"\x80"

#: Standard-library classes a format-0 record may construct as themselves (datums, containers).
_STDLIB = {
    ("decimal", "Decimal"): decimal.Decimal,
    ("datetime", "date"): dt.date,
    ("datetime", "time"): dt.time,
    ("datetime", "datetime"): dt.datetime,
    ("datetime", "timedelta"): dt.timedelta,
    ("datetime", "timezone"): dt.timezone,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "object"): object,
    ("copyreg", "_reconstructor"): copyreg._reconstructor,  # type: ignore[attr-defined]
}


class Format0Object:
    """A format-0 object: the qualified name of its old class, its constructor args, its state."""

    module = ""
    name = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Format0Object:
        obj = super().__new__(cls)
        obj.args = args
        obj.state = {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    args: tuple[Any, ...]
    state: dict[str, Any]

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = dict(state or {})

    def __repr__(self) -> str:
        return f"<format 0 {self.module}.{self.name}>"


_STUBS: dict[tuple[str, str], type[Format0Object]] = {}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        real = _STDLIB.get((module, name))
        if real is not None:
            return real
        if module.split(".", maxsplit=1)[0] in ("piestream", "pyarrow"):
            key = (module, name)
            stub = _STUBS.get(key)
            if stub is None:
                stub = type(name, (Format0Object,), {"module": module, "name": name})
                _STUBS[key] = stub
            return stub
        raise PlanFormatError(f"a format-0 plan refers to {module}.{name}, which no plan holds")


def load_format0(raw: bytes) -> Any:
    """The records of one format-0 job (a list of `Format0Object` fragments)."""
    try:
        return _Unpickler(io.BytesIO(raw)).load()
    except PlanFormatError:
        raise
    except Exception as e:
        raise PlanFormatError(f"a format-0 plan could not be read: {type(e).__name__}: {e}") from None


# -- conversion ------------------------------------------------------------------------------------

#: Builds a source node's connector spec: (source or table name, the columns its reader produced).
SourceSpecOf = Callable[[str, tuple[tuple[str, DataType], ...]], SourceSpec]
#: A sink's WITH options: (sink name, the options its format-0 writer held, e.g. the output path).
SinkOptionsOf = Callable[[str, Mapping[str, Any]], dict[str, str]]

_CLASSES: dict[str, type] = {
    **{cls.__name__: cls for cls in NODE_KINDS.values()},
    **{cls.__name__: cls for cls in DATACLASSES.values()},
    "Schema": Schema,
    "Field": Field,
    "OrderType": OrderType,
    "Interval": Interval,
    "TableDesc": TableDesc,
    "ColumnDesc": ColumnDesc,
}
_ENUM_CLASSES: dict[str, type[enum.Enum]] = {**ENUMS, "TypeKind": TypeKind}


class _Converter:
    def __init__(self, source_spec: SourceSpecOf, sink_options: SinkOptionsOf) -> None:
        self.source_spec = source_spec
        self.sink_options = sink_options

    def __call__(self, v: Any) -> Any:
        if isinstance(v, Format0Object):
            return self.obj(v)
        if isinstance(v, tuple):
            return tuple(self(x) for x in v)
        if isinstance(v, list):
            return [self(x) for x in v]
        if isinstance(v, dict):
            return {k: self(x) for k, x in v.items()}
        if isinstance(v, frozenset | set):
            return type(v)(self(x) for x in v)
        return v

    def obj(self, o: Format0Object) -> Any:
        if o.name in _ENUM_CLASSES:
            return _ENUM_CLASSES[o.name](*o.args)
        if o.name == "DataType":
            s = o.state
            return DataType(self(s["kind"]), self(s.get("fields", ())), self(s.get("elem")))
        if o.name == "SourceNode":
            return self.source_node(o.state)
        if o.name == "SinkNode":
            return self.sink_node(o.state)
        cls = _CLASSES.get(o.name)
        if cls is None or not o.module.startswith("piestream."):
            raise PlanFormatError(f"a format-0 plan holds a {o.module}.{o.name}, which has no conversion")
        return cls(**self.fields(cls, o.state))

    def fields(self, cls: type, state: Mapping[str, Any]) -> dict[str, Any]:
        """The declared fields of `cls` found in a format-0 state (cached extras are ignored)."""
        return {f.name: self(state[f.name]) for f in dataclasses.fields(cls) if f.init and f.name in state}

    def source_node(self, s: Mapping[str, Any]) -> SourceNode:
        schema: Schema = self(s["schema"])
        columns = tuple((f.name, f.data_type) for f in schema.fields[: s["reader_width"]])
        limits = self(s["limits"])
        assert isinstance(limits, SourceLimits)
        return SourceNode(
            schema=schema,
            stream_key=self(s["stream_key"]),
            append_only=s.get("append_only", True),
            spec=self.source_spec(s["source_name"], columns),
            limits=limits,
            state_table=self(s["state_table"]),
            split_ids=self(s["split_ids"]),
            dead_letter=self(s.get("dead_letter")),
        )

    def sink_node(self, s: Mapping[str, Any]) -> SinkNode:
        writer = s["writer"]
        held = dict(writer.state) if isinstance(writer, Format0Object) else {}
        return SinkNode(
            **self.fields(SinkNode, {k: v for k, v in s.items() if k != "writer"}),
            options=self.sink_options(s["sink_name"], held),
        )


def convert_fragments(raw: bytes, source_spec: SourceSpecOf, sink_options: SinkOptionsOf) -> list[Fragment]:
    """A format-0 job record as today's fragments."""
    records = load_format0(raw)
    if not isinstance(records, list):
        raise PlanFormatError("a format-0 job record is not a list of fragments")
    frags = _Converter(source_spec, sink_options)(records)
    if not all(isinstance(f, Fragment) for f in frags):
        raise PlanFormatError("a format-0 job record holds something other than fragments")
    return frags
