"""The persistent catalog: relations, streaming jobs (their fragments) and id sequences.

Relations are stored as JSON; a job's fragments (plan trees of picklable dataclasses) are stored
pickled with the relation that owns them. Creating or dropping an object — its relation, its
job, the new output edges of the upstream fragments it reads — is one meta-store transaction, so
after a crash the catalog holds either all of a DDL statement or none of it, and recovery rebuilds
the stream graph from it.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Iterable

from piestream.frontend.catalog import CatalogSnapshot, Relation
from piestream.meta.store import MetaStore
from piestream.plan.fragment import Fragment

_NS_REL = "catalog.relation"
_NS_JOB = "catalog.job"
_NS_SEQ = "catalog.seq"
FIRST_ID = 1000


class CatalogStore:
    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta
        self._lock = threading.RLock()
        self.relations: dict[str, Relation] = {}
        self.jobs: dict[int, list[Fragment]] = {}
        for _, raw in meta.scan(_NS_REL):
            rel = Relation.from_json(json.loads(raw))
            self.relations[rel.name] = rel
        for key, raw in meta.scan(_NS_JOB):
            self.jobs[int(key)] = pickle.loads(raw if isinstance(raw, bytes) else raw.encode("latin1"))

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
            snap = CatalogSnapshot(dict(self.relations))
            snap._next = 0
            return snap

    def get(self, name: str) -> Relation | None:
        with self._lock:
            return self.relations.get(name)

    def by_id(self, rel_id: int) -> Relation | None:
        with self._lock:
            return next((r for r in self.relations.values() if r.id == rel_id), None)

    def dependents(self, rel_id: int) -> list[Relation]:
        with self._lock:
            return [r for r in self.relations.values() if rel_id in r.depends_on]

    def all_fragments(self) -> list[Fragment]:
        with self._lock:
            return [f for frags in self.jobs.values() for f in frags]

    def fragment(self, fragment_id: int) -> Fragment | None:
        with self._lock:
            for frags in self.jobs.values():
                for f in frags:
                    if f.fragment_id == fragment_id:
                        return f
            return None

    # -- writing --------------------------------------------------------------------------------
    def create(
        self,
        relation: Relation,
        fragments: Iterable[Fragment] = (),
        replaced_fragments: Iterable[Fragment] = (),
    ) -> None:
        """Add a relation (and its job), and replace upstream fragments that gained outputs."""
        frags = list(fragments)
        replaced = list(replaced_fragments)
        with self._lock, self.meta.transaction():
            if relation.name in self.relations:
                raise ValueError(f"relation {relation.name} exists")
            self.meta.put(_NS_REL, relation.name, json.dumps(relation.to_json()))
            if relation.job_id is not None and frags:
                self.meta.put(_NS_JOB, str(relation.job_id), pickle.dumps(frags))
            changed = self._replace_fragments(replaced)
            self.relations[relation.name] = relation
            if relation.job_id is not None and frags:
                self.jobs[relation.job_id] = frags
            self.jobs.update(changed)

    def drop(self, names: Iterable[str], replaced_fragments: Iterable[Fragment] = ()) -> list[Relation]:
        """Remove relations (and their jobs); `replaced_fragments` lose edges into dropped jobs."""
        names = list(names)
        with self._lock, self.meta.transaction():
            gone = []
            for n in names:
                rel = self.relations.get(n)
                if rel is None:
                    continue
                self.meta.delete(_NS_REL, n)
                if rel.job_id is not None:
                    self.meta.delete(_NS_JOB, str(rel.job_id))
                gone.append(rel)
            live_jobs = {k: v for k, v in self.jobs.items() if k not in {r.job_id for r in gone}}
            self.jobs = live_jobs
            changed = self._replace_fragments(list(replaced_fragments))
            for rel in gone:
                del self.relations[rel.name]
            self.jobs.update(changed)
            return gone

    def _replace_fragments(self, replaced: list[Fragment]) -> dict[int, list[Fragment]]:
        """Persist jobs whose fragments changed; returns the new fragment lists by job."""
        changed: dict[int, list[Fragment]] = {}
        for f in replaced:
            frags = changed.get(f.job_id) or list(self.jobs.get(f.job_id, []))
            frags = [f if g.fragment_id == f.fragment_id else g for g in frags]
            changed[f.job_id] = frags
        for job_id, frags in changed.items():
            self.meta.put(_NS_JOB, str(job_id), pickle.dumps(frags))
        return changed
