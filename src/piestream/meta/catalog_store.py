"""The persistent catalog: relations, streaming jobs (their fragments) and id sequences.

Relations are stored as versioned JSON (`Relation.to_json`); a job's fragments as a versioned
plan document (`piestream.plan.serde`), so recovery depends on the format, never on Python module
paths. Creating or dropping an object — its relation, its job, the new output edges of the
upstream fragments it reads — is one meta-store transaction, so after a crash the catalog holds
either all of a DDL statement or none of it, and recovery rebuilds the stream graph from it.

A streaming job that failed (`BarrierManager` isolated it) has a *status record*: versioned JSON
(`JobStatus`) in its own namespace, so catalogs without any (older data directories) read as
"every job running". Recovery leaves failed jobs out of the running graph; DROP removes the
record, a rebuild replaces the job and clears it.

The catalog's format version is stored with it. Format 0 (before plans were versioned data:
fragments stored in Python's own object format, relations with an untyped ``extra`` dict) is
upgraded in place when a data directory is opened, in one transaction; a catalog of a newer
format than this build's is refused with a message naming both versions.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from piestream.common.types import DataType
from piestream.frontend.catalog import (
    DEFAULT_SCHEMA,
    CatalogFormatError,
    CatalogSnapshot,
    FunctionCatalog,
    Relation,
    SystemTables,
    check_entry_format,
)
from piestream.frontend.source_spec import definition_source_spec
from piestream.meta.store import MetaStore
from piestream.plan.fragment import Fragment
from piestream.plan.legacy import FORMAT0_MAGIC, convert_fragments
from piestream.plan.numeric_rules import keep_decimal_rules
from piestream.plan.serde import decode_fragments, encode_fragments
from piestream.plan.source import SourceSpec

log = logging.getLogger(__name__)

_NS_REL = "catalog.relation"
_NS_JOB = "catalog.job"
_NS_FUNC = "catalog.function"
_NS_SEQ = "catalog.seq"
_NS_FORMAT = "catalog.format"
_NS_STATUS = "catalog.job_status"
_NS_SCHEMA = "catalog.schema"
#: The format of schema records (`SchemaCatalog`) this build writes and the newest it reads.
SCHEMA_FORMAT = 1
#: The format of job status records this build writes and the newest it reads.
JOB_STATUS_FORMAT = 1
FIRST_ID = 1000
#: The catalog format this build writes and the newest it reads (see the module docstring).
CATALOG_FORMAT = 1


def _check_readable(meta: MetaStore) -> None:
    raw = meta.get(_NS_FORMAT, "version")
    if raw is not None and int(raw) > CATALOG_FORMAT:
        raise CatalogFormatError(
            f"the catalog of this data directory has format {int(raw)}; this piestream reads "
            f"catalog formats up to {CATALOG_FORMAT}"
        )


def relation_key(schema: str, name: str) -> str:
    """A relation's key in the meta store: its name in public (as every catalog before schemas
    stored it, so old catalogs read unchanged), ``schema`` 0x1f ``name`` elsewhere (the unit
    separator, a control character, is in no identifier PostgreSQL's lexer reads)."""
    return name if schema == DEFAULT_SCHEMA else f"{schema}\x1f{name}"


@dataclass(frozen=True)
class SchemaCatalog:
    """A user-created schema (CREATE SCHEMA); public always exists and has no record."""

    id: int
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"format": SCHEMA_FORMAT, "id": self.id, "name": self.name}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SchemaCatalog:
        check_entry_format(d, SCHEMA_FORMAT, "catalog entry of schema")
        return cls(d["id"], d["name"])


def read_relations(meta: MetaStore) -> list[Relation]:
    """Every catalog entry as stored (for readers that open the meta store read-only)."""
    _check_readable(meta)
    return [Relation.from_json(json.loads(raw)) for _, raw in meta.scan(_NS_REL)]


def read_job_fragments(meta: MetaStore, job_id: int) -> list[Fragment]:
    """A streaming job's fragments as stored (for readers that open the meta store read-only)."""
    _check_readable(meta)
    raw = meta.get(_NS_JOB, str(job_id))
    if raw is None or (raw if isinstance(raw, bytes) else raw.encode("latin1"))[:1] == FORMAT0_MAGIC:
        return []  # none, or not upgraded yet (format 0 predates chunked backfill: never partial)
    return decode_fragments(raw)


def read_relation(meta: MetaStore, name: str, schema: str = DEFAULT_SCHEMA) -> Relation | None:
    """One catalog entry as stored (for readers that open the meta store read-only)."""
    _check_readable(meta)
    stored = meta.get(_NS_REL, relation_key(schema, name))
    if stored is None:
        return None
    return Relation.from_json(json.loads(stored if isinstance(stored, str) else stored.decode()))


@dataclass(frozen=True)
class JobStatus:
    """Why a streaming job stopped: its error (SQLSTATE, message), the fragment blamed, when."""

    status: str  # "failed"
    sqlstate: str
    message: str
    fragment_id: int | None
    since: str  # ISO 8601, UTC

    def to_json(self) -> dict[str, Any]:
        return {"format": JOB_STATUS_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobStatus:
        if int(d.get("format", 0)) > JOB_STATUS_FORMAT:
            raise CatalogFormatError(
                f"a job status record has format {d['format']}; this piestream reads formats up to "
                f"{JOB_STATUS_FORMAT}"
            )
        return cls(d["status"], d["sqlstate"], d["message"], d.get("fragment_id"), d["since"])


class CatalogStore:
    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta
        self._lock = threading.RLock()
        self._relations: dict[tuple[str, str], Relation] = {}  # by (schema, name)
        self._schemas: dict[str, SchemaCatalog] = {}
        self._jobs: dict[int, list[Fragment]] = {}
        self._functions: dict[int, FunctionCatalog] = {}
        self._status: dict[int, JobStatus] = {}
        #: rows of the rw_catalog system relations, handed to every snapshot (set by the server)
        self.system_tables: SystemTables | None = None
        with meta.transaction():
            version = self._format()
            for _, raw in meta.scan(_NS_REL):
                rel = Relation.from_json(json.loads(raw))
                self._relations[rel.key] = rel
            if version == 0:
                self._upgrade_from_format_0()
            for key, raw in meta.scan(_NS_JOB):
                self._jobs[int(key)] = decode_fragments(raw)
            for _, raw in meta.scan(_NS_FUNC):
                fn = FunctionCatalog.from_json(json.loads(raw))
                self._functions[fn.id] = fn
            for _, raw in meta.scan(_NS_SCHEMA):
                sch = SchemaCatalog.from_json(json.loads(raw))
                self._schemas[sch.name] = sch
            for key, raw in meta.scan(_NS_STATUS):
                self._status[int(key)] = JobStatus.from_json(json.loads(raw))

    # -- format ---------------------------------------------------------------------------------
    def _format(self) -> int:
        raw = self.meta.get(_NS_FORMAT, "version")
        if raw is None:
            # a catalog written before the format was recorded is format 0; an empty one is new
            old = self.meta.scan(_NS_REL) or self.meta.scan(_NS_JOB)
            if not old:
                self.meta.put(_NS_FORMAT, "version", str(CATALOG_FORMAT))
            return 0 if old else CATALOG_FORMAT
        version = int(raw)
        if version > CATALOG_FORMAT:
            raise CatalogFormatError(
                f"the catalog of this data directory has format {version}; this piestream reads "
                f"catalog formats up to {CATALOG_FORMAT}",
                hint="Open the data directory with the newer piestream that wrote it.",
            )
        return version

    def _upgrade_from_format_0(self) -> None:
        """Rewrite every job's fragments and every relation in today's format (one transaction)."""
        jobs = self.meta.scan(_NS_JOB)
        for key, raw in jobs:
            data = raw if isinstance(raw, bytes) else raw.encode("latin1")
            if data[:1] != FORMAT0_MAGIC:
                continue  # already a plan document
            frags = convert_fragments(data, self._format0_source_spec, self._format0_sink_options)
            frags = keep_decimal_rules(frags)  # planned with decimal128 NUMERIC: keeps its rules
            self.meta.put(_NS_JOB, key, encode_fragments(frags))
        for rel in self._relations.values():
            self.meta.put(_NS_REL, relation_key(*rel.key), json.dumps(rel.to_json()))
        self.meta.put(_NS_FORMAT, "version", str(CATALOG_FORMAT))
        log.info("upgraded the catalog from format 0 to %d (%d streaming jobs)", CATALOG_FORMAT, len(jobs))

    def _format0_source_spec(self, name: str, columns: tuple[tuple[str, DataType], ...]) -> SourceSpec:
        """A format-0 source node read `columns` of source (or connector table) `name`."""
        return definition_source_spec(self._relations[(DEFAULT_SCHEMA, name)], columns)

    def _format0_sink_options(self, name: str, writer: Mapping[str, Any]) -> dict[str, str]:
        """A format-0 sink's options: its WITH options, with the output path its writer held."""
        options = {k.lower(): v for k, v in self._relations[(DEFAULT_SCHEMA, name)].properties.items()}
        if isinstance(writer.get("path"), str):
            options["path"] = writer["path"]
        return options

    # -- ids ------------------------------------------------------------------------------------
    def next_id(self, seq: str = "object") -> int:
        """A fresh id of a sequence ("object" for relations and state tables, "fragment", "job")."""
        with self._lock, self.meta.transaction():
            cur = self.meta.get(_NS_SEQ, seq)
            value = (int(cur) if cur is not None else FIRST_ID) + 1
            self.meta.put(_NS_SEQ, seq, str(value))
            return value

    # -- reading --------------------------------------------------------------------------------
    def snapshot(self) -> CatalogSnapshot:
        with self._lock:
            functions: dict[str, list[FunctionCatalog]] = {}
            for fn in self._functions.values():
                functions.setdefault(fn.name, []).append(fn)
            return CatalogSnapshot(
                dict(self._relations),
                last_id=0,
                functions=functions,
                system_tables=self.system_tables,
                schemas={DEFAULT_SCHEMA, *self._schemas},
            )

    def schemas(self) -> list[SchemaCatalog]:
        """The user-created schemas (public, which always exists, is not among them)."""
        with self._lock:
            return sorted(self._schemas.values(), key=lambda c: c.id)

    def create_schema(self, schema: SchemaCatalog) -> None:
        with self._lock, self.meta.transaction():
            if schema.name in self._schemas or schema.name == DEFAULT_SCHEMA:
                raise ValueError(f"schema {schema.name} exists")
            self.meta.put(_NS_SCHEMA, schema.name, json.dumps(schema.to_json()))
            self._schemas[schema.name] = schema

    def drop_schema(self, name: str) -> None:
        """Remove an empty schema's record (the caller dropped what it held)."""
        with self._lock, self.meta.transaction():
            if any(k[0] == name for k in self._relations):
                raise ValueError(f"schema {name} is not empty")
            self.meta.delete(_NS_SCHEMA, name)
            self._schemas.pop(name, None)

    def functions(self) -> list[FunctionCatalog]:
        with self._lock:
            return sorted(self._functions.values(), key=lambda f: f.id)

    def get(self, name: str, schema: str = DEFAULT_SCHEMA) -> Relation | None:
        """The relation `name` of `schema` (user-written names resolve through a session's
        `CatalogSnapshot.get_relation`, which knows its search_path)."""
        with self._lock:
            return self._relations.get((schema, name))

    def by_id(self, rel_id: int) -> Relation | None:
        with self._lock:
            return next((r for r in self._relations.values() if r.id == rel_id), None)

    def dependents(self, rel_id: int) -> list[Relation]:
        with self._lock:
            return [r for r in self._relations.values() if rel_id in r.depends_on]

    def job_fragments(self, job_id: int) -> list[Fragment]:
        with self._lock:
            return list(self._jobs.get(job_id, []))

    def all_fragments(self) -> list[Fragment]:
        with self._lock:
            return [f for frags in self._jobs.values() for f in frags]

    def fragment(self, fragment_id: int) -> Fragment | None:
        with self._lock:
            for frags in self._jobs.values():
                for f in frags:
                    if f.fragment_id == fragment_id:
                        return f
            return None

    def job_status(self, job_id: int | None) -> JobStatus | None:
        with self._lock:
            return self._status.get(job_id) if job_id is not None else None

    def failed_jobs(self) -> dict[int, JobStatus]:
        with self._lock:
            return dict(self._status)

    # -- writing --------------------------------------------------------------------------------
    def mark_failed(self, job_ids: Iterable[int], status: JobStatus) -> None:
        """Record that these jobs failed (one transaction)."""
        with self._lock, self.meta.transaction():
            for j in job_ids:
                if j in self._jobs:
                    self.meta.put(_NS_STATUS, str(j), json.dumps(status.to_json()))
                    self._status[j] = status

    def replace_job(
        self,
        relation: Relation,
        old_job_id: int,
        fragments: Iterable[Fragment],
        replaced_fragments: Iterable[Fragment],
    ) -> None:
        """A rebuilt job: `relation` (same name) with its new job replaces the old job, whose
        status record goes; the upstream fragments gain their edges into it (one transaction)."""
        frags = list(fragments)
        with self._lock, self.meta.transaction():
            self.meta.delete(_NS_JOB, str(old_job_id))
            self.meta.delete(_NS_STATUS, str(old_job_id))
            self.meta.put(_NS_REL, relation_key(*relation.key), json.dumps(relation.to_json()))
            assert relation.job_id is not None
            self.meta.put(_NS_JOB, str(relation.job_id), encode_fragments(frags))
            self._jobs.pop(old_job_id, None)
            self._status.pop(old_job_id, None)
            changed = self._replace_fragments(list(replaced_fragments))
            self._relations[relation.key] = relation
            self._jobs[relation.job_id] = frags
            self._jobs.update(changed)

    def create(
        self,
        relation: Relation,
        fragments: Iterable[Fragment] = (),
        replaced_fragments: Iterable[Fragment] = (),
        companions: Iterable[Relation] = (),
    ) -> None:
        """Add a relation (and its job, and `companions` it owns), and replace the upstream
        fragments that gained outputs into the job: one transaction."""
        frags = list(fragments)
        new = [relation, *companions]
        with self._lock, self.meta.transaction():
            for rel in new:
                if rel.key in self._relations or sum(r.key == rel.key for r in new) > 1:
                    raise ValueError(f"relation {rel.qualified_name} exists")
                self.meta.put(_NS_REL, relation_key(*rel.key), json.dumps(rel.to_json()))
            if relation.job_id is not None and frags:
                self.meta.put(_NS_JOB, str(relation.job_id), encode_fragments(frags))
            changed = self._replace_fragments(list(replaced_fragments))
            self._relations.update((rel.key, rel) for rel in new)
            if relation.job_id is not None and frags:
                self._jobs[relation.job_id] = frags
            self._jobs.update(changed)

    def write_created(self, conn: Any, created: Iterable[tuple[Relation, list[Fragment]]]) -> None:
        """Store new relations and their jobs inside the caller's meta-store transaction (the
        epoch that commits the transaction block that created them). The caller checked the
        names; `add_created` installs them in memory once that transaction committed."""
        for rel, frags in created:
            conn.execute(
                "INSERT OR REPLACE INTO kv (ns, key, value) VALUES (?, ?, ?)",
                (_NS_REL, relation_key(*rel.key), json.dumps(rel.to_json())),
            )
            if rel.job_id is not None and frags:
                conn.execute(
                    "INSERT OR REPLACE INTO kv (ns, key, value) VALUES (?, ?, ?)",
                    (_NS_JOB, str(rel.job_id), encode_fragments(frags)),
                )

    def add_created(self, created: Iterable[tuple[Relation, list[Fragment]]]) -> None:
        with self._lock:
            for rel, frags in created:
                self._relations[rel.key] = rel
                if rel.job_id is not None and frags:
                    self._jobs[rel.job_id] = list(frags)

    def replace(self, old: Relation, relation: Relation, replaced_fragments: Iterable[Fragment] = ()) -> None:
        """Swap a relation for its new version (CREATE OR REPLACE VIEW; ALTER: a new name or new
        columns), with the running fragments that change with it: one transaction."""
        self.replace_all([(old, relation)], replaced_fragments)

    def replace_all(
        self, swaps: Iterable[tuple[Relation, Relation]], replaced_fragments: Iterable[Fragment] = ()
    ) -> None:
        """`replace` of several relations at once (a rename rewrites its dependents too)."""
        swaps = list(swaps)
        with self._lock, self.meta.transaction():
            for old, _ in swaps:
                self.meta.delete(_NS_REL, relation_key(*old.key))
            for _, relation in swaps:
                self.meta.put(_NS_REL, relation_key(*relation.key), json.dumps(relation.to_json()))
            changed = self._replace_fragments(list(replaced_fragments))
            for old, _ in swaps:
                del self._relations[old.key]
            for _, relation in swaps:
                self._relations[relation.key] = relation
            self._jobs.update(changed)

    def drop(
        self, keys: Iterable[tuple[str, str]], replaced_fragments: Iterable[Fragment] = ()
    ) -> list[Relation]:
        """Remove relations by (schema, name), and their jobs; `replaced_fragments` lose edges
        into dropped jobs."""
        keys = list(keys)
        with self._lock, self.meta.transaction():
            gone = []
            for k in keys:
                rel = self._relations.get(k)
                if rel is None:
                    continue
                self.meta.delete(_NS_REL, relation_key(*k))
                if rel.job_id is not None:
                    self.meta.delete(_NS_JOB, str(rel.job_id))
                    self.meta.delete(_NS_STATUS, str(rel.job_id))
                    self._status.pop(rel.job_id, None)
                gone.append(rel)
            dropped_jobs = {r.job_id for r in gone}
            self._jobs = {k: v for k, v in self._jobs.items() if k not in dropped_jobs}
            changed = self._replace_fragments(list(replaced_fragments))
            for rel in gone:
                del self._relations[rel.key]
            self._jobs.update(changed)
            return gone

    def create_function(self, fn: FunctionCatalog, replaces: FunctionCatalog | None = None) -> None:
        """Add a function (or swap `replaces` for it: CREATE OR REPLACE) in one transaction."""
        with self._lock, self.meta.transaction():
            if replaces is not None:
                self.meta.delete(_NS_FUNC, str(replaces.id))
            self.meta.put(_NS_FUNC, str(fn.id), json.dumps(fn.to_json()))
            if replaces is not None:
                del self._functions[replaces.id]
            self._functions[fn.id] = fn

    def drop_functions(self, fns: Iterable[FunctionCatalog]) -> None:
        with self._lock, self.meta.transaction():
            fns = list(fns)
            for fn in fns:
                self.meta.delete(_NS_FUNC, str(fn.id))
            for fn in fns:
                self._functions.pop(fn.id, None)

    def _replace_fragments(self, replaced: list[Fragment]) -> dict[int, list[Fragment]]:
        """Persist jobs whose fragments changed; returns the new fragment lists by job."""
        changed: dict[int, list[Fragment]] = {}
        for f in replaced:
            frags = changed.get(f.job_id) or list(self._jobs.get(f.job_id, []))
            frags = [f if g.fragment_id == f.fragment_id else g for g in frags]
            changed[f.job_id] = frags
        for job_id, frags in changed.items():
            self.meta.put(_NS_JOB, str(job_id), encode_fragments(frags))
        return changed
