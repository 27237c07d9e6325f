"""Catalog objects as the frontend sees them: tables, MVs, views, indexes, sources, sinks, and
user-defined functions.

The binder resolves names through a `CatalogReader`; meta owns the persistent catalog and hands
the frontend a snapshot. Every relation that stores rows (a table, an MV, an index) carries the
`TableDesc` of its storage; hidden columns (a table's `_row_id`, stream-key columns an MV keeps
that the query did not select) are listed but not shown to users.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from piestream.common.errors import FeatureNotSupported, PiestreamError, UndefinedTable
from piestream.common.scalar import Datum
from piestream.common.schema import Schema
from piestream.common.types import DataType, Field, parse_type, type_text
from piestream.encoding.value_datum import decode_datum, encode_datum
from piestream.expr.expr import Expr
from piestream.frontend.parser.names import DEFAULT_SCHEMA, fold, object_name, quote_ident
from piestream.plan.materialize import ConflictBehavior
from piestream.storage.table.desc import TableDesc


class RelationKind(enum.Enum):
    TABLE = "table"
    MATERIALIZED_VIEW = "materialized view"
    VIEW = "view"
    INDEX = "index"
    SOURCE = "source"
    SINK = "sink"
    SUBSCRIPTION = "subscription"


@dataclass(frozen=True)
class ColumnCatalog:
    name: str
    data_type: DataType
    hidden: bool = False
    #: the constant an INSERT (or COPY) that omits the column writes (ALTER TABLE ADD COLUMN ...
    #: DEFAULT); None: NULL. Rows stored before the column was added read it too (its storage
    #: `ColumnDesc.missing`).
    default: Datum = None
    #: the object id allocated when ALTER TABLE ADD COLUMN added it (0: the table had it from the
    #: start). A view or MV with a smaller id was created before it: its query, bound again (a
    #: view on every read, an MV on REBUILD), does not see it in ``*``, as PostgreSQL expands
    #: ``*`` once at creation.
    since: int = 0
    comment: str | None = None  # COMMENT ON COLUMN
    #: a DEFAULT evaluated at each INSERT / COPY instead of a constant (RisingWave's ``now()``),
    #: as its SQL text (``now()``); None: the default is `default`. An optional JSON key, so the
    #: catalog format stays 7 and catalogs written before it read as "no such default".
    default_expr: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": type_text(self.data_type), "hidden": self.hidden}
        if self.default is not None:  # the value encoding's bytes of the datum, as hex
            out["default"] = encode_datum(self.default, self.data_type).hex()
        if self.since:
            out["since"] = self.since
        if self.comment is not None:
            out["comment"] = self.comment
        if self.default_expr is not None:
            out["default_expr"] = self.default_expr
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ColumnCatalog:
        t = parse_type(d["type"])
        default = d.get("default")
        return cls(
            d["name"],
            t,
            d["hidden"],
            None if default is None else decode_datum(bytes.fromhex(default), 0, t)[0],
            d.get("since", 0),
            d.get("comment"),
            d.get("default_expr"),
        )


@dataclass(frozen=True)
class IndexInfo:
    """What an INDEX indexes: the relation's id and the key columns, in order."""

    index_of: int
    columns: tuple[str, ...]


@dataclass(frozen=True)
class SourceInfo:
    """What a SOURCE reads besides its WITH options (`Relation.properties`)."""

    encode: str | None = None  # FORMAT ... ENCODE <encode>, lower-case
    encode_options: dict[str, str] = field(default_factory=dict)
    generated: tuple[str, ...] = ()  # columns declared ``AS expr`` the connector supplies
    dead_letter: TableDesc | None = None  # the companion table malformed records go to
    format: str | None = None  # FORMAT <format>, lower-case (None: none given)
    include: tuple[tuple[str, str, str], ...] = ()  # INCLUDE (kind, column, header name)


@dataclass(frozen=True)
class WatermarkInfo:
    """``WATERMARK FOR column AS expr`` of an append-only source or table: `column` indexes the
    relation's columns, `expr` is bound over them (stored in the plan format's expression JSON)."""

    column: int
    expr: Expr

    def to_json(self) -> dict[str, Any]:
        from piestream.plan.serde import to_json

        return {"column": self.column, "expr": to_json(self.expr)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WatermarkInfo:
        from piestream.plan.serde import from_json

        return cls(d["column"], from_json(d["expr"]))


@dataclass(frozen=True)
class SinkInfo:
    """A SINK's connector, its type, and the state table naming what each actor staged."""

    connector: str
    sink_type: str  # append-only | upsert | changelog
    path: str | None  # where committed output is published (None: nowhere, e.g. blackhole)
    state_table: TableDesc


@dataclass(frozen=True)
class SubscriptionInfo:
    """A SUBSCRIPTION: the relation it follows, its change log table, how long changes are kept,
    and the committed epoch it started after (the log holds every change after it)."""

    of: int  # the upstream table / MV id
    log_table: TableDesc
    retention_ms: int
    start_epoch: int


#: The catalog entry format `Relation.to_json` writes; format 0 kept kind-specific fields in an
#: untyped ``extra`` dict and is still read; format 2 added subscriptions (a format-1 reader would
#: not know them, so it refuses the directory instead of dropping them); format 3 may spell a
#: column type ``numeric dscale N`` (`type_text`: a plain NUMERIC's display scale), which a
#: format-2 reader could not parse (so it refuses the entry by its format instead); format 4
#: relations hold per-value-scale NUMERIC (issue 14): values with trailing zeros, NaN and
#: +-Infinity, which a format-3 reader would take for corruption (so it refuses them by number),
#: and a source's or table's watermark (which a format-3 reader would drop silently).
#: A format-3 relation's values were stored normalized at 10 fraction digits: they read as they
#: are, a numeric(p, s) column's padded to s on read. Format 5 relations may live in a schema
#: other than public (CREATE SCHEMA): a format-4 reader would take them for public's, so it
#: refuses them by number. Entries of format 4 and before are public's, under their stored name
#: (a name with a dot an older build made of ``public.t`` stays that name: ``"public.t"``).
#: Format 6: schema evolution — a table's columns may have been added by ALTER TABLE (with a
#: default and the id they were added at) and its storage may hold values stored before them
#: (`TableDesc.value_required`), which a format-5 reader would take for corruption; a relation
#: may carry a COMMENT. A format-5 reader refuses them by number.
#: Format 7: a streaming job's relation may be ``"adaptive"`` (its fragments follow the cluster's
#: task slots: `meta.rescale`), which a format-6 reader would run at a fixed parallelism; it
#: refuses them by number. Entries of format 6 and before read as fixed at their parallelism.
RELATION_FORMAT = 7


class CatalogFormatError(PiestreamError):
    """A catalog entry written by a newer piestream than this one."""

    sqlstate = "XX001"  # data_corrupted: the data directory is not readable by this build


def check_entry_format(d: dict[str, Any], newest: int, what: str) -> int:
    """The format of a stored catalog entry; refuses one newer than this build reads."""
    version = int(d.get("format", 0))
    if version > newest:
        raise CatalogFormatError(
            f'{what} "{d.get("name")}" has format {version}; this piestream reads formats up to {newest}',
            hint="Open the data directory with the newer piestream that wrote it.",
        )
    return version


@dataclass(frozen=True)
class Relation:
    """One named catalog object."""

    id: int
    name: str
    kind: RelationKind
    columns: tuple[ColumnCatalog, ...]
    definition: str = ""  # the SQL that created it
    table: TableDesc | None = None  # storage, for tables / MVs / indexes
    depends_on: tuple[int, ...] = ()  # relation ids this one reads
    job_id: int | None = None  # the streaming job maintaining it (tables, MVs, indexes, sinks)
    append_only: bool = False
    properties: dict[str, str] = field(default_factory=dict)  # WITH (...) options
    schema_name: str = DEFAULT_SCHEMA
    fragment_id: int | None = None  # the job's root fragment: where a reader of its changes attaches
    parallelism: int | None = None  # actors of that fragment
    #: ADAPTIVE: the job's fragments follow the cluster's task slots (else FIXED at `parallelism`)
    adaptive: bool = False
    conflict: ConflictBehavior | None = None  # tables: what an insert of an existing pk does
    row_id_index: int | None = None  # tables without a pk: the hidden `_row_id` column
    owned_by: int | None = None  # dropped with this relation (a source's dead-letter table)
    index: IndexInfo | None = None
    source: SourceInfo | None = None
    sink: SinkInfo | None = None
    subscription: SubscriptionInfo | None = None
    watermark: WatermarkInfo | None = None
    comment: str | None = None  # COMMENT ON TABLE / VIEW / ...

    @property
    def visible_columns(self) -> list[ColumnCatalog]:
        return [c for c in self.columns if not c.hidden]

    @property
    def key(self) -> tuple[str, str]:
        """(schema, name): what names it uniquely in its database."""
        return (self.schema_name, self.name)

    @property
    def qualified_name(self) -> str:
        """``schema.name`` for a relation outside public, else its name (for messages)."""
        return self.name if self.schema_name == DEFAULT_SCHEMA else f"{self.schema_name}.{self.name}"

    @property
    def schema(self) -> Schema:
        return Schema(tuple(Field(c.name, c.data_type) for c in self.columns))

    @property
    def stores_rows(self) -> bool:
        return self.table is not None

    def as_seen_by(self, reader_id: int) -> Relation:
        """This relation as a reader created at object id `reader_id` (a subscription, whose
        change log holds the columns it had then) sees it: without the columns ALTER TABLE ADD
        COLUMN appended after (they are last, so every other column keeps its index)."""
        kept = tuple(c for c in self.columns if c.since <= reader_id)
        return self if len(kept) == len(self.columns) else replace(self, columns=kept)

    def column_index(self, name: str) -> int | None:
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        return None

    def to_json(self) -> dict[str, Any]:
        src, sink = self.source, self.sink
        return {
            "format": RELATION_FORMAT,
            "id": self.id,
            "name": self.name,
            "kind": self.kind.value,
            "columns": [c.to_json() for c in self.columns],
            "definition": self.definition,
            "table": None if self.table is None else self.table.to_json(),
            "depends_on": list(self.depends_on),
            "job_id": self.job_id,
            "append_only": self.append_only,
            "properties": self.properties,
            "schema": self.schema_name,
            "fragment_id": self.fragment_id,
            "parallelism": self.parallelism,
            **({"adaptive": True} if self.adaptive else {}),
            "conflict": None if self.conflict is None else self.conflict.value,
            "row_id_index": self.row_id_index,
            "owned_by": self.owned_by,
            "index": None
            if self.index is None
            else {"of": self.index.index_of, "columns": list(self.index.columns)},
            "source": None
            if src is None
            else {
                "encode": src.encode,
                "encode_options": src.encode_options,
                "generated": list(src.generated),
                "dead_letter": None if src.dead_letter is None else src.dead_letter.to_json(),
                **({"format": src.format} if src.format is not None else {}),
                **({"include": [list(i) for i in src.include]} if src.include else {}),
            },
            "sink": None
            if sink is None
            else {
                "connector": sink.connector,
                "sink_type": sink.sink_type,
                "path": sink.path,
                "state_table": sink.state_table.to_json(),
            },
            "subscription": None
            if self.subscription is None
            else {
                "of": self.subscription.of,
                "log_table": self.subscription.log_table.to_json(),
                "retention_ms": self.subscription.retention_ms,
                "start_epoch": self.subscription.start_epoch,
            },
            "watermark": None if self.watermark is None else self.watermark.to_json(),
            **({"comment": self.comment} if self.comment is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Relation:
        version = check_entry_format(d, RELATION_FORMAT, "catalog entry")
        typed = d if version else _typed_from_extra(d.get("extra") or {})
        index, src, sink = typed.get("index"), typed.get("source"), typed.get("sink")
        sub = typed.get("subscription")
        return cls(
            id=d["id"],
            name=d["name"],
            kind=RelationKind(d["kind"]),
            columns=tuple(ColumnCatalog.from_json(c) for c in d["columns"]),
            definition=d["definition"],
            table=None if d["table"] is None else TableDesc.from_json(d["table"]),
            depends_on=tuple(d["depends_on"]),
            job_id=d["job_id"],
            append_only=d["append_only"],
            properties=dict(d["properties"]),
            schema_name=d.get("schema", DEFAULT_SCHEMA),
            fragment_id=typed.get("fragment_id"),
            parallelism=typed.get("parallelism"),
            adaptive=bool(d.get("adaptive", False)),
            conflict=None if typed.get("conflict") is None else ConflictBehavior(typed["conflict"]),
            row_id_index=typed.get("row_id_index"),
            owned_by=typed.get("owned_by"),
            index=None if index is None else IndexInfo(index["of"], tuple(index["columns"])),
            source=None
            if src is None
            else SourceInfo(
                encode=src["encode"],
                encode_options=dict(src["encode_options"]),
                generated=tuple(src["generated"]),
                dead_letter=None if src["dead_letter"] is None else TableDesc.from_json(src["dead_letter"]),
                format=src.get("format"),
                include=tuple(tuple(i) for i in src.get("include", ())),
            ),
            sink=None
            if sink is None
            else SinkInfo(
                sink["connector"], sink["sink_type"], sink["path"], TableDesc.from_json(sink["state_table"])
            ),
            subscription=None
            if sub is None
            else SubscriptionInfo(
                sub["of"], TableDesc.from_json(sub["log_table"]), sub["retention_ms"], sub["start_epoch"]
            ),
            watermark=None if d.get("watermark") is None else WatermarkInfo.from_json(d["watermark"]),
            comment=d.get("comment"),
        )


def _typed_from_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """Format 0's ``extra`` dict as format 1's typed fields."""
    out: dict[str, Any] = {
        "fragment_id": extra.get("fragment_id"),
        "parallelism": extra.get("parallelism"),
        "conflict": extra.get("conflict"),
        "row_id_index": extra.get("row_id"),
        "owned_by": extra.get("owned_by"),
    }
    if "index_of" in extra:
        out["index"] = {"of": extra["index_of"], "columns": extra.get("index_columns", [])}
    if "encode" in extra or "dead_letter" in extra:
        out["source"] = {
            "encode": extra.get("encode"),
            "encode_options": extra.get("encode_options") or {},
            "generated": extra.get("generated") or [],
            "dead_letter": extra.get("dead_letter"),
        }
    if "sink_type" in extra:
        out["sink"] = {
            "connector": extra["connector"],
            "sink_type": extra["sink_type"],
            "path": extra.get("path"),
            "state_table": extra["state_table"],
        }
    return out


#: The catalog entry format `FunctionCatalog.to_json` writes.
FUNCTION_FORMAT = 1


@dataclass(frozen=True)
class FunctionCatalog:
    """A user-defined scalar function (CREATE FUNCTION). Durable as versioned JSON holding the
    source text of its body, never a pickled Python object: a Python body is compiled again
    wherever it runs (in the frontend to check it, in Spark workers to evaluate it)."""

    id: int
    name: str
    arg_names: tuple[str, ...]  # "" for an argument declared by its type only
    arg_types: tuple[DataType, ...]
    return_type: DataType
    language: str  # "sql" | "python"
    body: str
    definition: str = ""  # the CREATE FUNCTION statement
    strict: bool = False  # RETURNS NULL ON NULL INPUT
    vectorized: bool = False  # python: called once per chunk with Arrow arrays
    schema_name: str = DEFAULT_SCHEMA

    @property
    def signature(self) -> str:
        from piestream.expr.coercion import type_name

        return f"{self.name}({', '.join(type_name(t) for t in self.arg_types)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FUNCTION_FORMAT,
            "id": self.id,
            "name": self.name,
            "arg_names": list(self.arg_names),
            "arg_types": [str(t) for t in self.arg_types],
            "return_type": str(self.return_type),
            "language": self.language,
            "body": self.body,
            "definition": self.definition,
            "strict": self.strict,
            "vectorized": self.vectorized,
            "schema": self.schema_name,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FunctionCatalog:
        check_entry_format(d, FUNCTION_FORMAT, "catalog entry of function")
        return cls(
            id=d["id"],
            name=d["name"],
            arg_names=tuple(d["arg_names"]),
            arg_types=tuple(parse_type(t) for t in d["arg_types"]),
            return_type=parse_type(d["return_type"]),
            language=d["language"],
            body=d["body"],
            definition=d["definition"],
            strict=d["strict"],
            vectorized=d["vectorized"],
            schema_name=d.get("schema", DEFAULT_SCHEMA),
        )


class CatalogReader(Protocol):
    """What the binder and planner need from the catalog."""

    def get_relation(self, name: str) -> Relation | None: ...

    def functions_named(self, name: str) -> list[FunctionCatalog]: ...

    def relations(self) -> Iterable[Relation]: ...

    def next_id(self) -> int: ...


#: The schema of piestream's own system relations (RisingWave's): rw_streaming_errors ...
SYSTEM_SCHEMA = "rw_catalog"
#: Schemas every database has that hold no user relations (PostgreSQL's, and piestream's own).
BUILTIN_SCHEMAS = ("pg_catalog", "information_schema", SYSTEM_SCHEMA)
#: What names a session's temporary schema (``pg_temp_<session>``, PostgreSQL's spelling).
TEMP_SCHEMA = "pg_temp"
#: The database a session is in when its client named none (RisingWave's default).
DEFAULT_DATABASE = "dev"
#: A view's property holding the search_path it was created with (its query is bound again on
#: every read, and must find the relations it found then); absent: public.
VIEW_SEARCH_PATH = "search_path"
#: A view's property set when it was created with a column list (``CREATE VIEW v (x, y) AS q``):
#: its column names are then not necessarily q's (what pg_get_viewdef must render)
VIEW_COLUMN_LIST = "column_list"


class SystemTables(Protocol):
    """The rows of the ``rw_catalog`` relations, computed when a query reads them."""

    def rows(self, name: str) -> tuple[Schema, list[tuple[Any, ...]]] | None:
        """(columns, rows) of relation `name`, or None if there is no such relation."""
        ...


class InvalidSchemaName(PiestreamError):
    sqlstate = "3F000"


def parse_search_path(value: str, user: str = "") -> tuple[str, ...]:
    """The schemas a ``search_path`` setting names, in order (``"$user"`` is the session user's
    schema; PostgreSQL skips entries that name no existing schema when resolving)."""
    out: list[str] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith('"') and part.endswith('"') and len(part) >= 2:
            name = part[1:-1].replace('""', '"')
        else:
            name = fold(part.strip("'"))
        if name == "$user":
            if not user:
                continue
            name = user
        out.append(name)
    return tuple(out)


def format_search_path(path: tuple[str, ...]) -> str:
    """`path` as a search_path setting (`parse_search_path` reads it back)."""
    return ", ".join(quote_ident(n) for n in path)


@dataclass
class CatalogSnapshot:
    """An in-memory catalog (tests, and the frontend's view of meta's catalog).

    Relations are keyed by (schema, name), PostgreSQL's namespaces: `get_relation` resolves a
    qualified name (`ObjectName` with a schema) in that schema and an unqualified one through
    `search_path` (the first schema that exists and holds the name), as PostgreSQL does.
    """

    by_name: dict[tuple[str, str], Relation] = field(default_factory=dict)
    last_id: int = 1000  # `next_id` hands out ids after it
    functions: dict[str, list[FunctionCatalog]] = field(default_factory=dict)  # by name
    system_tables: SystemTables | None = None  # the rw_catalog relations (a running database's)
    schemas: set[str] = field(default_factory=lambda: {DEFAULT_SCHEMA})  # user schemas that exist
    search_path: tuple[str, ...] = (DEFAULT_SCHEMA,)
    database: str = DEFAULT_DATABASE  # the session's database: the only one a name may name
    #: the session's schema of temporary relations (``pg_temp`` names it; searched first)
    temp_schema: str | None = None
    #: binding a view's (or a rebuilt MV's) query: its id. Columns added to a table after it
    #: (`ColumnCatalog.since` > as_of) are not in its ``*`` (PostgreSQL expands ``*`` at CREATE).
    as_of: int | None = None

    def _schema(self, written: str) -> str:
        """A schema as written: ``pg_temp`` is the session's temporary schema."""
        return self.temp_schema if written == TEMP_SCHEMA and self.temp_schema is not None else written

    def check_database(self, name: str) -> None:
        """A three-part name's database must be the current one (PostgreSQL: 0A000)."""
        written = object_name(name)
        if written.database is not None and written.database != self.database:
            raise FeatureNotSupported(f'cross-database references are not implemented: "{written.qualified}"')

    def get_relation(self, name: str) -> Relation | None:
        self.check_database(name)
        schema = object_name(name).schema
        if schema is not None:
            return self.by_name.get((self._schema(schema), str(name)))
        for sch in self.effective_path:
            rel = self.by_name.get((sch, str(name)))
            if rel is not None:
                return rel
        return None

    def creation_schema(self, name: str) -> str:
        """The schema a CREATE of `name` puts the object in: the one written (which must exist),
        else the first schema of search_path that exists (PostgreSQL's rule; 3F000 if none)."""
        self.check_database(name)
        schema = object_name(name).schema
        if schema is not None:
            schema = self._schema(schema)
            if schema not in self.schemas:
                if schema in BUILTIN_SCHEMAS:
                    raise FeatureNotSupported(f'creating objects in schema "{schema}" is not supported')
                raise InvalidSchemaName(f'schema "{schema}" does not exist')
            return schema
        if self.current_schema is None:
            raise InvalidSchemaName("no schema has been selected to create in")
        return self.current_schema

    @property
    def effective_path(self) -> tuple[str, ...]:
        """search_path as unqualified relation names are looked up: the session's temporary
        schema first unless the path places ``pg_temp`` itself (PostgreSQL's rule)."""
        path = tuple(self._schema(p) for p in self.search_path)
        if self.temp_schema is None or self.temp_schema in path:
            return path
        return (self.temp_schema, *path)

    @property
    def current_schema(self) -> str | None:
        """PostgreSQL's current_schema(): the first schema of search_path that exists."""
        return next((sch for sch in self.search_path if sch in self.schemas), None)

    def functions_named(self, name: str) -> list[FunctionCatalog]:
        return list(self.functions.get(name, ()))

    def relations(self) -> Iterable[Relation]:
        return list(self.by_name.values())

    def for_view(self, view: Relation, path: tuple[str, ...]) -> CatalogSnapshot:
        """The catalog `view`'s query is bound in: unqualified names through `path` (the
        search_path it was created with); temporary relations only for a temporary view."""
        temp = self.temp_schema if view.schema_name == self.temp_schema else None
        return replace(self, search_path=path, temp_schema=temp, as_of=view.id)

    def relations_in(self, schema: str) -> list[Relation]:
        return [r for r in self.by_name.values() if r.schema_name == schema]

    def next_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def add(self, rel: Relation) -> None:
        self.by_name[rel.key] = rel
        self.last_id = max(self.last_id, rel.id)

    def require(self, name: str, position: int | None = None) -> Relation:
        rel = self.get_relation(name)
        if rel is None:
            shown = object_name(name).qualified
            raise UndefinedTable(f'relation "{shown}" does not exist', position=position)
        return rel

    def dependents(self, rel_id: int) -> list[Relation]:
        return [r for r in self.by_name.values() if rel_id in r.depends_on]

    def indexes_of(self, rel_id: int) -> list[Relation]:
        """The indexes created on a table or MV (batch scans may read them instead)."""
        return [
            r
            for r in self.by_name.values()
            if r.kind is RelationKind.INDEX and r.index is not None and r.index.index_of == rel_id
        ]
