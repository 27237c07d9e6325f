"""`/metrics`: the server's numbers in Prometheus' text format (`prometheus_client`).

A custom Collector reads what the server already keeps (the barrier manager's per-epoch
measurements and per-fragment totals, the Hummock version, the streaming-error log, the backfill
tracker, the wire protocol's counters) at scrape time: nothing is instrumented per row. Names
and labels follow RisingWave's where it has the same thing (`meta_barrier_duration_seconds`,
`stream_source_output_rows_counts`, `stream_mview_input_row_count`, `stream_sink_input_row_count`,
`stream_actor_in_record_cnt`, `user_compute_error_count` ...), so its Grafana habits carry over;
docs/grafana/piestream.json is a dashboard over them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from piestream.common.metrics import Histogram
from piestream.frontend.catalog import Relation
from piestream.plan.materialize import MaterializeNode
from piestream.plan.sink import SinkNode
from piestream.plan.source import SourceNode
from piestream.server.dashboard.model import Backfill, backfills, state_sizes

if TYPE_CHECKING:
    from piestream.plan.fragment import StreamGraph
    from piestream.server.database import Database
    from piestream.server.pgwire.server import PgServer

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class _FragmentInfo:
    """What a fragment is, for labels: its job's relation and the row-counting nodes it holds."""

    relation: str
    kind: str
    relation_id: int
    source: str | None  # the SourceNode's source name
    mview_table: int | None  # the MaterializeNode's table id
    sink: bool


def _histogram(name: str, doc: str, h: Histogram, labels: dict[str, str] | None = None) -> Metric:
    buckets, total = h.cumulative()
    fam = HistogramMetricFamily(name, doc, labels=list(labels) if labels else None)
    fam.add_metric(list(labels.values()) if labels else [], buckets, total)
    return fam


class PiestreamCollector(Collector):
    """Reads one `Database` (and the `PgServer` serving it, if any) at each scrape."""

    def __init__(self, db: Database, pgwire: PgServer | None = None) -> None:
        self.db = db
        self.pgwire = pgwire
        self._graph: StreamGraph | None = None
        self._relations: tuple[tuple[int, str], ...] = ()
        self._fragments: dict[int, _FragmentInfo] = {}
        self._backfills_done: dict[int, Backfill] = {}  # by job id

    def describe(self) -> list[Metric]:
        return []  # no scrape at registration: families are read at collect time

    def collect(self) -> Iterator[Metric]:
        rels = list(self.db.catalog.snapshot().relations())
        yield from self._barriers()
        yield from self._fragment_rows(rels)
        yield from self._state(rels)
        yield from self._errors(rels)
        yield from self._backfill(rels)
        yield from self._source_lag(rels)
        yield from self._pgwire()

    # -- barriers and epochs --------------------------------------------------------------------
    def _barriers(self) -> Iterator[Metric]:
        b = self.db.barriers
        m = b.metrics
        yield _histogram(
            "meta_barrier_duration_seconds", "an epoch from barrier injection to commit", m.barrier_latency
        )
        yield _histogram(
            "stream_spark_job_duration_seconds",
            "the run of an epoch's actors (Spark job, retries included)",
            m.job_seconds,
        )
        yield _histogram(
            "meta_barrier_commit_duration_seconds", "the meta-store commit of an epoch", m.commit_seconds
        )
        yield CounterMetricFamily(
            "meta_barrier_epochs_committed", "epochs committed since start", value=m.epochs_committed
        )
        yield CounterMetricFamily(
            "meta_barrier_epoch_failures",
            "failed epoch attempts (retried or job isolated)",
            value=m.epoch_failures,
        )
        yield CounterMetricFamily(
            "stream_dml_input_row_count", "rows of DML and inbox changes taken in by epochs", value=m.dml_rows
        )
        yield GaugeMetricFamily(
            "storage_max_committed_epoch",
            "the last committed epoch",
            value=self.db.hummock.max_committed_epoch,
        )
        yield GaugeMetricFamily(
            "stream_failed_jobs", "streaming jobs isolated as failed since start", value=len(b.failed_jobs)
        )
        last = b.stats[-1] if b.stats else None
        yield GaugeMetricFamily(
            "state_store_block_cache_hit_ratio",
            "block-cache hit ratio of the actors' workers, last epoch (mean over actors)",
            value=last.block_cache_hit_rate if last is not None else 0.0,
        )
        yield GaugeMetricFamily(
            "stream_operator_cache_bytes",
            "operator caches' size after the last epoch (all workers)",
            value=last.cache_bytes if last is not None else 0,
        )

    # -- rows per fragment, source, MV, sink ----------------------------------------------------
    def _fragment_infos(self, rels: list[Relation]) -> dict[int, _FragmentInfo]:
        """Fragment id -> labels; recomputed only when the running graph or catalog changed."""
        graph = self.db.barriers.graph
        key = tuple((r.id, r.name) for r in rels)
        if graph is self._graph and self._relations == key:
            return self._fragments
        by_job = {r.job_id: r for r in rels if r.job_id is not None}
        out: dict[int, _FragmentInfo] = {}
        for fid, f in graph.fragments.items():
            r = by_job.get(f.job_id)
            source: str | None = None
            mview: int | None = None
            sink = False
            for n in f.root.walk():
                if isinstance(n, SourceNode):
                    source = n.source_name
                elif isinstance(n, MaterializeNode):
                    mview = n.table.table_id
                elif isinstance(n, SinkNode):
                    sink = True
            out[fid] = _FragmentInfo(
                r.name if r else f"job {f.job_id}",
                r.kind.value if r else "",
                r.id if r else -1,
                source,
                mview,
                sink,
            )
        self._graph, self._relations, self._fragments = graph, key, out
        return out

    def _fragment_rows(self, rels: list[Relation]) -> Iterator[Metric]:
        infos = self._fragment_infos(rels)
        totals = self.db.barriers.metrics.fragments.snapshot()
        labels = ["fragment_id", "relation", "relation_kind"]
        rin = CounterMetricFamily(
            "stream_actor_in_record_cnt", "rows into a fragment's actors", labels=labels
        )
        rout = CounterMetricFamily(
            "stream_actor_out_record_cnt", "rows out of a fragment's actors", labels=labels
        )
        cache = CounterMetricFamily(
            "stream_operator_cache_lookups",
            "operator-cache lookups (join keys, agg groups, pks) by outcome",
            labels=[*labels, "type"],
        )
        src = CounterMetricFamily(
            "stream_source_output_rows_counts",
            "rows a source read",
            labels=["source_id", "source_name", "fragment_id"],
        )
        mv = CounterMetricFamily(
            "stream_mview_input_row_count",
            "rows written into a table or materialized view",
            labels=["table_id", "table_name", "relation_kind", "fragment_id"],
        )
        sink = CounterMetricFamily(
            "stream_sink_input_row_count", "rows into a sink", labels=["sink_id", "sink_name", "fragment_id"]
        )
        for fid, t in sorted(totals.items()):
            info = infos.get(fid)
            if info is None:
                continue  # dropped since
            f = str(fid)
            lv = [f, info.relation, info.kind]
            rin.add_metric(lv, t.get("rows_in", 0.0))
            rout.add_metric(lv, t.get("rows_out", 0.0))
            hits, misses = t.get("cache_hits", 0.0), t.get("cache_misses", 0.0)
            if hits or misses:  # fragments with an operator cache (joins, aggs, ...)
                cache.add_metric([*lv, "hit"], hits)
                cache.add_metric([*lv, "miss"], misses)
            if info.source is not None:
                src.add_metric([str(info.relation_id), info.source, f], t.get("rows.source", 0.0))
            if info.mview_table is not None:
                mv.add_metric([str(info.mview_table), info.relation, info.kind, f], t.get("rows.mview", 0.0))
            if info.sink:
                sink.add_metric([str(info.relation_id), info.relation, f], t.get("rows.sink", 0.0))
        yield from (rin, rout, cache, src, mv, sink)

    # -- state ----------------------------------------------------------------------------------
    def _state(self, rels: list[Relation]) -> Iterator[Metric]:
        names = {r.table.table_id: r.name for r in rels if r.table is not None}
        size = GaugeMetricFamily(
            "state_store_table_size_bytes",
            "bytes of SSTs per state table (an SST shared by tables split evenly)",
            labels=["table_id", "table_name"],
        )
        keys = GaugeMetricFamily(
            "state_store_table_key_count", "keys in SSTs per state table", labels=["table_id", "table_name"]
        )
        nbytes, nkeys = state_sizes(self.db)
        for t in sorted(nbytes):
            lv = [str(t), names.get(t, "")]  # internal state tables have no relation of their own
            size.add_metric(lv, nbytes[t])
            keys.add_metric(lv, nkeys[t])
        yield size
        yield keys
        ssts = len(self.db.hummock.version.all_ssts())
        yield GaugeMetricFamily("storage_version_sst_count", "SSTs in the current version", value=ssts)

    # -- errors ---------------------------------------------------------------------------------
    def _errors(self, rels: list[Relation]) -> Iterator[Metric]:
        jobs = {r.job_id: r.name for r in rels if r.job_id is not None}
        fam = CounterMetricFamily(
            "user_compute_error_count",
            "data errors and inconsistent ops streaming jobs survived (rw_streaming_errors)",
            labels=["relation", "error_type", "executor_name", "sqlstate"],
        )
        acc: dict[tuple[str, str, str, str], int] = {}
        for e in self.db.barriers.errors.entries():
            k = (jobs.get(e.job_id, f"job {e.job_id}"), e.kind, e.executor or "", e.sqlstate)
            acc[k] = acc.get(k, 0) + e.count
        for k, n in sorted(acc.items()):
            fam.add_metric(list(k), n)
        yield fam

    # -- backfill -------------------------------------------------------------------------------
    def _backfill(self, rels: list[Relation]) -> Iterator[Metric]:
        done = GaugeMetricFamily(
            "stream_backfill_snapshot_read_row_count", "rows a backfill has read", labels=["relation"]
        )
        total = GaugeMetricFamily(
            "stream_backfill_snapshot_total_row_count", "rows a backfill reads in all", labels=["relation"]
        )
        ratio = GaugeMetricFamily(
            "stream_backfill_progress_ratio", "a backfill's progress, 0..1", labels=["relation"]
        )
        # a finished backfill stays finished (a job never backfills twice): read it once, then
        # from `_backfills_done`, so a scrape reads state only for the jobs still backfilling
        by_name = {r.name: r.job_id for r in rels if r.job_id is not None}
        live = set(by_name.values())
        self._backfills_done = {j: b for j, b in self._backfills_done.items() if j in live}
        pending = [r for r in rels if r.job_id is not None and r.job_id not in self._backfills_done]
        fresh = backfills(self.db, pending) if pending else []
        for b in fresh:
            j = by_name.get(b.relation)
            if j is not None and b.percent >= 100.0:  # done (percent is 100 only then)
                self._backfills_done[j] = b
        for b in sorted([*self._backfills_done.values(), *fresh], key=lambda b: b.relation):
            ratio.add_metric([b.relation], b.percent / 100.0)
            if b.percent < 100.0:  # row counts while it runs (a finished one is just 1.0)
                done.add_metric([b.relation], b.rows_done)
                total.add_metric([b.relation], b.rows_total)
        yield from (done, total, ratio)

    # -- source lag -----------------------------------------------------------------------------
    def _source_lag(self, rels: list[Relation]) -> Iterator[Metric]:
        """Kafka partitions as RisingWave exports them (the broker's high watermark and the last
        message read: lag = high watermark - latest message id - 1), and CDC tables' lag behind
        their upstream in bytes and seconds — what rw_source_splits / rw_cdc_sources show, asked
        of the brokers and upstreams at scrape time."""
        from piestream.server.cdc_handlers import cdc_status_rows
        from piestream.server.system_tables import RwCatalog

        labels = ["source_id", "source_name", "partition"]
        high = GaugeMetricFamily(
            "source_kafka_high_watermark", "a partition's end offset at the broker", labels=labels
        )
        latest = GaugeMetricFamily(
            "source_latest_message_id",
            "the offset of the last message committed from a partition",
            labels=labels,
        )
        cdc_labels = ["table_name", "slot_name"]
        lag_bytes = GaugeMetricFamily(
            "source_cdc_lag_bytes",
            "WAL / binlog bytes the upstream has beyond what is committed",
            labels=cdc_labels,
        )
        lag_seconds = GaugeMetricFamily(
            "source_cdc_lag_seconds",
            "how far the last committed upstream transaction is behind now (0 when caught up)",
            labels=cdc_labels,
        )
        job_ids = {r.job_id: r.id for r in rels if r.job_id is not None}
        try:
            splits = RwCatalog(self.db).rows("rw_source_splits")
            cdc = cdc_status_rows(self.db)
        except Exception:  # a scrape never fails for an upstream's sake; the views say why
            log.warning("source lag not read for /metrics", exc_info=True)
            splits, cdc = None, []
        for job, _, source, connector, split, _, nxt, end, _ in splits[1] if splits else []:
            if connector != "kafka" or nxt is None or end is None:
                continue
            lv = [str(job_ids.get(job, job)), source, split]
            high.add_metric(lv, end)
            latest.add_metric(lv, nxt - 1)
        for row in cdc:
            if row.lag_bytes is not None:
                lag_bytes.add_metric([row.table_name, row.slot_name], row.lag_bytes)
            if row.lag_seconds is not None:
                lag_seconds.add_metric([row.table_name, row.slot_name], row.lag_seconds)
        yield from (high, latest, lag_bytes, lag_seconds)

    # -- wire protocol --------------------------------------------------------------------------
    def _pgwire(self) -> Iterator[Metric]:
        srv = self.pgwire
        if srv is None:
            return
        m = srv.metrics
        yield GaugeMetricFamily(
            "pgwire_active_sessions", "client sessions past start-up", value=srv.sessions()
        )
        yield CounterMetricFamily(
            "pgwire_connections", "connections accepted since start", value=m.connections
        )
        yield CounterMetricFamily(
            "pgwire_statement_errors", "statements answered with an error", value=m.statement_errors
        )
        yield CounterMetricFamily(
            "pgwire_auth_failures", "failed logins (wrong password, unknown user)", value=m.auth_failures
        )
        lat = HistogramMetricFamily(
            "pgwire_statement_duration_seconds", "statement latency by statement kind", labels=["kind"]
        )
        for kind, h in m.statement_seconds.items():
            buckets, s = h.cumulative()
            lat.add_metric([kind], buckets, s)
        yield lat


class MetricsEndpoint:
    """A registry with the collector, kept by the dashboard across scrapes (label caches)."""

    def __init__(self, db: Database, pgwire: PgServer | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = PiestreamCollector(db, pgwire)
        self.registry.register(self.collector)

    def scrape(self) -> bytes:
        return generate_latest(self.registry)
