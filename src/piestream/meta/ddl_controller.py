"""The DDL controller: creating and dropping catalog objects and streaming jobs, atomically
(DESIGN "meta"; RisingWave's ``DdlController``).

A streaming job is four things that must agree: its catalog entry, its fragments in the running
graph (and the new output edges of the upstream fragments it reads), the state it backfills, and
its first epoch. `create_job` stores the first two in one meta-store transaction while no epoch
runs (`BarrierManager.paused`), then runs the first epoch (the backfill); if that fails, it puts
the graph and the catalog back as they were and forgets the job's state tables, so a failed
statement changes nothing. `drop` removes jobs and their dependents the same way. Server handlers
parse, check names and plan; everything that changes meta happens here.

With chunked backfill the first epoch only starts it: `create_job` keeps forcing epochs until
every backfill actor reports (in its state table) all vnodes done, telling the waiting client how
far it is every `notice_interval` seconds; `rw_catalog.rw_ddl_progress` shows the same numbers.
If the process stops meanwhile, the job is in the catalog and its backfill resumes on restart.

`lock` is held for a whole DDL statement (its checks, its planning and the change), so two
sessions never plan against a catalog the other is changing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace

from piestream.common.errors import (
    DependentObjectsStillExist,
    DuplicateObject,
    FeatureNotSupported,
    PiestreamError,
)
from piestream.frontend.catalog import Relation
from piestream.frontend.planner import Ids, PlannedJob
from piestream.meta.barrier_manager import BarrierManager, TransactionCommit
from piestream.meta.catalog_store import CatalogStore
from piestream.meta.ddl_progress import BackfillProgress, DdlProgressTracker, NoticeTimer
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.rescale import RescalePlan, plan_rescale
from piestream.plan.fragment import DispatchEdge, Fragment

log = logging.getLogger(__name__)


class DdlController:
    def __init__(self, catalog: CatalogStore, barriers: BarrierManager, hummock: HummockManager) -> None:
        self.catalog = catalog
        self.barriers = barriers
        self.hummock = hummock
        self.lock = threading.RLock()
        self.progress: DdlProgressTracker | None = None  # set by the database (reads storage)
        self.notice_interval = 5.0  # seconds between progress notices to the client
        self._refusals: dict[int | None, int] = {}  # ADAPTIVE jobs that could not follow: slots

    def backfill_progress(self, job_id: int) -> BackfillProgress | None:
        """The job's backfill progress at the committed epoch (None: nothing to backfill)."""
        if self.progress is None:
            return None
        return self.progress.read([(job_id, self.catalog.job_fragments(job_id))]).get(job_id)

    # -- ids ------------------------------------------------------------------------------------
    def ids(self) -> Ids:
        """The id allocators a planner draws from (meta owns the sequences)."""
        return Ids(
            lambda: self.catalog.next_id("object"),
            lambda: self.catalog.next_id("fragment"),
            self.upstream_parallelism,
        )

    def next_job_id(self) -> int:
        return self.catalog.next_id("job")

    def next_object_id(self) -> int:
        return self.catalog.next_id("object")

    def upstream_parallelism(self, fragment_id: int) -> int:
        """The parallelism of a running fragment a new job reads (no-shuffle: the same)."""
        f = self.barriers.graph.fragments.get(fragment_id) or self.catalog.fragment(fragment_id)
        if f is None:
            raise PiestreamError(f"fragment {fragment_id} is not running", sqlstate="XX000")
        return f.parallelism

    # -- creating -------------------------------------------------------------------------------
    def create_relations(self, relation: Relation, companions: Sequence[Relation] = ()) -> None:
        """Catalog objects without a streaming job (a view, a source and its dead-letter table)."""
        self.catalog.create(relation, companions=companions)

    def replace_view(self, old: Relation, new: Relation) -> None:
        if self.catalog.dependents(old.id):
            raise DependentObjectsStillExist(f'cannot replace view "{old.name}": other objects depend on it')
        self.catalog.replace(old, new)

    def alter(self, swaps: Sequence[tuple[Relation, Relation]], fragments: Sequence[Fragment] = ()) -> None:
        """ALTER: relations swapped for their new versions and running fragments replaced (same
        ids: each actor runs the new plan from the next epoch, over the same state), in one
        meta-store transaction between two epochs."""
        with self.barriers.paused():
            self.catalog.replace_all(swaps, fragments)
            self.barriers.add_fragments(fragments)

    def rescale(self, relation: Relation, parallelism: int, *, adaptive: bool | None = None) -> RescalePlan:
        """ALTER ... SET PARALLELISM: the job's fragments (and the no-shuffle groups it leads)
        get `parallelism`, the edges into them follow, and the relations whose root fragment
        changed record it, in one meta-store transaction between two epochs; the next epoch runs
        the new actors over the same vnode-keyed state (`piestream.meta.rescale`). `adaptive`
        (when given) is recorded on the job's relation: ADAPTIVE (True) or FIXED (False)."""
        if relation.job_id is None:
            raise PiestreamError(f'"{relation.name}" has no streaming job', sqlstate="55000")
        with self.lock, self.barriers.paused():
            if self.progress is not None and self.progress.backfilling(relation.job_id):
                raise FeatureNotSupported(
                    f'cannot change the parallelism of "{relation.name}" while its backfill runs',
                    hint="Wait until rw_catalog.rw_ddl_progress no longer lists it.",
                )
            plan = plan_rescale(self.barriers.graph, relation.job_id, parallelism, relation.name)
            news: dict[tuple[str, str], tuple[Relation, Relation]] = {}
            for r in self.catalog.snapshot().relations():
                new = r
                if r.fragment_id is not None and r.fragment_id in plan.parallelism:
                    new = replace(new, parallelism=plan.parallelism[r.fragment_id])
                if adaptive is not None and r.job_id == relation.job_id and r.adaptive != adaptive:
                    new = replace(new, adaptive=adaptive)
                if new is not r:
                    news[r.key] = (r, new)
            if not news and not plan.changed:
                return plan
            self.catalog.replace_all(news.values(), plan.fragments)
            self.barriers.add_fragments(plan.fragments)
            return plan

    def follow_slots(self, slots: int) -> bool:
        """ADAPTIVE jobs follow the cluster's task slots: each whose fragments would change runs
        `slots` actors from the next epoch (capped and refused where ALTER ... SET PARALLELISM
        caps and refuses: a refused job keeps its parallelism and the refusal is logged once).
        All land between the same two epochs. False if a DDL statement runs (try again later)."""
        graph = self.barriers.graph
        running = {f.job_id for f in graph.fragments.values()}
        todo = []
        for rel in self.catalog.snapshot().relations():
            if not rel.adaptive or rel.job_id not in running or self.catalog.job_status(rel.job_id):
                continue
            try:
                if plan_rescale(graph, rel.job_id, slots, rel.name, following=True).changed:
                    todo.append(rel)
            except PiestreamError as e:
                self._refused(rel, slots, e)
        if not todo:
            return True
        if not self.lock.acquire(blocking=False):  # never wait for a DDL from the barrier loop
            return False
        try:
            with self.barriers.paused():
                for old in todo:
                    now = self.catalog.get(old.name, old.schema_name)  # as it is, under the lock
                    if now is None or not now.adaptive or now.job_id != old.job_id:
                        continue  # dropped, or made FIXED since the snapshot
                    try:
                        plan = self.rescale(now, slots)
                        log.info(
                            "adaptive %s: %d task slots, fragments %s",
                            now.name,
                            slots,
                            dict(plan.parallelism),
                        )
                    except PiestreamError as e:  # e.g. still backfilling: the next check retries
                        self._refused(now, slots, e)
        finally:
            self.lock.release()
        return True

    def _refused(self, rel: Relation, slots: int, e: PiestreamError) -> None:
        if self._refusals.get(rel.job_id) != slots:
            self._refusals[rel.job_id] = slots
            log.warning(
                "adaptive %s stays at its parallelism for %d task slots: %s", rel.name, slots, e.message
            )

    def _with_edges_into(self, planned: PlannedJob) -> dict[int, Fragment]:
        """The upstream fragments a new job reads, each with its new output edge into the job."""
        graph = self.barriers.graph
        replaced: dict[int, Fragment] = {}
        for up, edge in planned.job.upstream_edges:
            f = replaced.get(up) or graph.fragments.get(up) or self.catalog.fragment(up)
            if f is None:
                raise PiestreamError(f"fragment {up} is not running", sqlstate="XX000")
            replaced[up] = f.with_outputs((*f.outputs, edge))
        return replaced

    def create_job(
        self,
        planned: PlannedJob,
        *,
        backfill: bool,
        companions: Sequence[Relation] = (),
        notice: Callable[[str], None] | None = None,
    ) -> None:
        """Store a new streaming job and start it; with `backfill`, run epochs until its backfill
        is done before returning (progress notices to `notice`), and if one fails undo
        everything (catalog, graph, state tables)."""
        job = planned.job
        job_id = planned.relation.job_id
        tracked = backfill and self.progress is not None and job_id is not None
        if tracked:  # before the relation is in the catalog: no read may see it empty
            self._track(job_id, planned.relation)
        try:
            with self.barriers.paused():
                graph = self.barriers.graph
                replaced = self._with_edges_into(planned)
                originals = [graph.fragments[fid] for fid in replaced if fid in graph.fragments]
                self.catalog.create(planned.relation, job.fragments, replaced.values(), companions)
                self.barriers.add_fragments([*job.fragments, *replaced.values()])
        except BaseException:
            if tracked:
                self._untrack(job_id)
            raise
        if not backfill:
            return
        try:
            self._backfill(job_id, planned.relation, notice)
        except Exception:
            with self.barriers.paused():
                if planned.relation.job_id is not None:
                    self.barriers.remove_job(planned.relation.job_id)
                    self.barriers.failed_jobs.pop(planned.relation.job_id, None)
                    self.barriers.errors.forget_job(planned.relation.job_id)
                self.barriers.add_fragments(originals)
                self.catalog.drop([planned.relation.key, *(c.key for c in companions)], originals)
            self.hummock.drop_tables(_job_table_ids(job.fragments, [planned.relation, *companions]))
            raise
        finally:
            if tracked:
                self._untrack(job_id)

    def _track(self, job_id: int | None, relation: Relation) -> None:
        """Reads of the job's relation are refused (55000) until `_untrack`."""
        if self.progress is not None and job_id is not None:
            self.progress.start(job_id, relation.name, relation.definition or "")

    def _untrack(self, job_id: int | None, *, done: bool = True) -> None:
        if self.progress is not None and job_id is not None:
            self.progress.finish(job_id, done=done)

    def _backfill(
        self,
        job_id: int | None,
        relation: Relation,
        notice: Callable[[str], None] | None,
        *,
        stop_on_failure: bool = False,
    ) -> None:
        """Force epochs until the job's backfill is done (each epoch emits a bounded part). A
        job isolated meanwhile fails the statement (or, with `stop_on_failure`, ends the wait)."""
        timer = NoticeTimer(self.notice_interval)
        while True:
            self.barriers.flush()
            failed = self.barriers.failed_jobs.get(job_id if job_id is not None else -1)
            if failed is not None:
                if stop_on_failure:
                    return
                raise failed
            p = self.backfill_progress(job_id) if job_id is not None else None
            if p is None or p.done:
                return
            if notice is not None and timer.due():
                notice(f'{relation.kind.value} "{relation.name}" backfill: {p.describe()}')

    # -- transaction blocks ----------------------------------------------------------------------
    def commit_transaction(self, t: TransactionCommit, created: Sequence[PlannedJob] = ()) -> int:
        """Commit a transaction block in one epoch, with the tables it created: their catalog
        entries are written in that epoch's meta-store transaction and their jobs join the graph
        with it, so after a crash the tables and their rows are both there or both absent.
        Returns the epoch; raises (changing nothing) on a name taken meanwhile or a conflict."""
        if not created:
            return _wait(self.barriers, self.barriers.submit_transaction(t))
        with self.lock:  # no other DDL until the epoch committed: the names stay free
            for p in created:
                if self.catalog.get(p.relation.name, p.relation.schema_name) is not None:
                    raise DuplicateObject(
                        f'relation "{p.relation.name}" already exists',
                        detail="Another session created it after this transaction began.",
                    )
            jobs = [(p.relation, list(p.job.fragments)) for p in created]
            t.fragments = [f for _, frags in jobs for f in frags]
            t.record = lambda conn: self.catalog.write_created(conn, jobs)
            t.committed = lambda: self.catalog.add_created(jobs)
            return _wait(self.barriers, self.barriers.submit_transaction(t))

    # -- rebuilding -----------------------------------------------------------------------------
    def rebuild_job(self, old: Relation, planned: PlannedJob) -> None:
        """Replace a failed job by a newly planned one for the same relation (same name and id,
        new job, fragments and state tables) and backfill it from its upstream's current
        snapshot, as CREATE does; the old job's state is dropped. If the backfill fails the
        relation stays failed, with the new job and its error."""
        assert old.job_id is not None and planned.relation.job_id is not None
        old_fragments = self.catalog.job_fragments(old.job_id)
        self._track(planned.relation.job_id, planned.relation)  # its rows are refilled from empty
        try:
            self._rebuild(old, planned, old_fragments)
        finally:
            # a rebuild that failed mid-backfill leaves a partial MV: keep refusing its reads
            p = self.backfill_progress(planned.relation.job_id)
            self._untrack(planned.relation.job_id, done=p is None or p.done)

    def _rebuild(self, old: Relation, planned: PlannedJob, old_fragments: Sequence[Fragment]) -> None:
        job = planned.job
        assert old.job_id is not None and planned.relation.job_id is not None
        with self.barriers.paused():
            self.barriers.remove_job(old.job_id)
            replaced = self._with_edges_into(planned)
            self.catalog.replace_job(planned.relation, old.job_id, job.fragments, replaced.values())
            self.barriers.add_fragments([*job.fragments, *replaced.values()])
            self.barriers.failed_jobs.pop(old.job_id, None)
            self.barriers.errors.forget_job(old.job_id)
        self.hummock.drop_tables(_job_table_ids(old_fragments, [old]))
        try:
            self._backfill(planned.relation.job_id, planned.relation, None, stop_on_failure=True)
        except PiestreamError as e:  # strict mode: the backfill met a data error
            with self.barriers.paused():
                self.barriers.remove_job(planned.relation.job_id)
                self.barriers.failed_jobs[planned.relation.job_id] = e
                for fn in self.barriers.on_job_failed:
                    fn([planned.relation.job_id], e, None)
            raise
        failed = self.barriers.failed_jobs.get(planned.relation.job_id)
        if failed is not None:
            raise failed

    # -- dropping -------------------------------------------------------------------------------
    def drop(self, targets: Sequence[Relation], *, cascade: bool) -> list[Relation]:
        """Drop `targets`, and with `cascade` everything that depends on them (dependents first),
        with their jobs and state; returns what was dropped. An object owned by another (a
        source's dead-letter table) goes only with its owner."""
        ids = {t.id for t in targets}
        for t in targets:
            if t.owned_by is not None and t.owned_by not in ids:
                raise DependentObjectsStillExist(
                    f'cannot drop {t.kind.value} "{t.name}": it belongs to another object',
                    hint="It is dropped together with its owner (e.g. DROP SOURCE).",
                )
        order: list[Relation] = []

        def visit(r: Relation) -> None:
            for d in self.catalog.dependents(r.id):
                # an index goes with its table or MV, as in PostgreSQL (and RisingWave)
                index_of_r = d.index is not None and d.index.index_of == r.id
                if not cascade and d.id not in ids and d.owned_by != r.id and not index_of_r:
                    raise DependentObjectsStillExist(
                        f"cannot drop {r.kind.value} {r.name} because other objects depend on it",
                        detail=f"{d.kind.value} {d.name} depends on {r.kind.value} {r.name}",
                        hint="Use DROP ... CASCADE to drop the dependent objects too.",
                    )
                visit(d)
            if r not in order:
                order.append(r)

        for r in targets:
            visit(r)
        if not order:
            return []
        with self.barriers.paused():
            removed: list[Fragment] = []
            for r in order:
                if r.job_id is not None:
                    # a failed job is not running: its fragments are the catalog's
                    removed += self.barriers.remove_job(r.job_id) or self.catalog.job_fragments(r.job_id)
                    self.barriers.errors.forget_job(r.job_id)
            gone = {f.fragment_id for f in removed}
            # the upstream fragments that lost their edges into the dropped jobs
            replaced = [
                f
                for f in self.barriers.graph.fragments.values()
                if any(e.downstream_fragment_id in gone for e in self._stored_outputs(f))
            ]
            self.catalog.drop([r.key for r in order], replaced)
        table_ids = _job_table_ids(removed, order)
        if table_ids:
            self.hummock.drop_tables(table_ids)
        return order

    def _stored_outputs(self, f: Fragment) -> tuple[DispatchEdge, ...]:
        stored = self.catalog.fragment(f.fragment_id)
        return stored.outputs if stored is not None else ()


def _wait(barriers: BarrierManager, fut: Future[int]) -> int:
    barriers.wake()
    return fut.result()


def _job_table_ids(fragments: Sequence[Fragment], relations: Sequence[Relation]) -> list[int]:
    """Every state table of the fragments and the storage of the relations."""
    ids = {t.table_id for f in fragments for t in f.tables()}
    ids |= {r.table.table_id for r in relations if r.table is not None}
    return sorted(ids)
