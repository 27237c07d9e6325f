"""The dashboard's HTML pages (server-rendered; the overview reloads itself every few seconds)."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from piestream.common.epoch import epoch_to_unix_ms
from piestream.common.text import format_bytes
from piestream.server.dashboard.model import JobGraph, Overview, job_graph, overview
from piestream.server.dashboard.svg import epoch_timeline, fragment_graph

if TYPE_CHECKING:
    from piestream.server.database import Database

REFRESH_SECONDS = 2

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; font-size: 13px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
.error { color: #b00; }
nav a { margin-right: 1em; }
"""


def _page(title: str, body: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8">{meta}<title>{escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f'<nav><a href="/">piestream</a></nav><h1>{escape(title)}</h1>{body}</body></html>'
    )


def _table(table_id: str, headers: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    return f"<table id='{table_id}'><tr>{head}</tr>" + "".join(rows) + "</table>"


def _listing(table_id: str, headers: list[str], rows: list[str], empty: str) -> str:
    """A table of `rows`, or the sentence `empty` when there are none."""
    return _table(table_id, headers, rows) if rows else f"<p id='{table_id}'>{empty}</p>"


def _epoch_time(epoch: int) -> str:
    if not epoch:
        return "-"
    ms = epoch_to_unix_ms(epoch)
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _relations(o: Overview) -> str:
    rows = []
    for r in o.relations:
        name = escape(r.name)
        if r.job_id is not None:
            name = f'<a class="relation" href="/job/{quote(r.name)}">{name}</a>'
        size = format_bytes(o.state_bytes.get(r.table.table_id, 0)) if r.table is not None else ""
        keys = f"{o.state_keys.get(r.table.table_id, 0):,}" if r.table is not None else ""
        rows.append(
            f"<tr><td>{escape(r.kind.value)}</td><td>{name}</td><td class='num'>{len(r.visible_columns)}</td>"
            f"<td class='num'>{r.parallelism or ''}{' adaptive' if r.adaptive else ''}</td>"
            f"<td class='num'>{size}</td>"
            f"<td class='num'>{keys}</td>"
            f"<td><code>{escape(r.definition[:120])}</code></td></tr>"
        )
    if not rows:
        return "<p>No relations yet.</p>"
    headers = ["kind", "name", "columns", "parallelism", "state size", "keys", "definition"]
    return _table("relations", headers, rows)


def _state_tables(o: Overview) -> str:
    rows = [
        f"<tr><td>{tid}</td><td>{escape(o.table_names.get(tid, '(dropped)'))}</td>"
        f"<td class='num'>{format_bytes(b)}</td><td class='num'>{o.state_keys.get(tid, 0):,}</td></tr>"
        for tid, b in sorted(o.state_bytes.items(), key=lambda kv: -kv[1])
    ]
    if not rows:
        return "<p>No state in storage yet.</p>"
    return _table("state-tables", ["table id", "table", "size in SSTs", "keys"], rows)


def _functions(o: Overview) -> str:
    rows = [
        f"<tr><td>{escape(f.signature)}</td>"
        f"<td>{escape(f.language)}{' (vectorized)' if f.vectorized else ''}</td>"
        f"<td>{escape(str(f.return_type))}</td></tr>"
        for f in o.functions
    ]
    return _listing("functions", ["function", "language", "returns"], rows, "No functions.")


def _backfills(o: Overview) -> str:
    rows = [
        f"<tr><td>{escape(b.relation)}</td><td>{escape(b.upstream)}</td>"
        f"<td><progress max='100' value='{b.percent:.1f}'></progress> {b.percent:.1f}%</td>"
        f"<td class='num'>{b.rows_done:,} / {b.rows_total:,}</td>"
        f"<td class='num'>{b.vnodes_done}/{b.vnodes_total}</td></tr>"
        for b in o.backfills
    ]
    headers = ["relation", "reads", "progress", "rows done / total", "vnodes"]
    return _listing("backfills", headers, rows, "No backfills.")


def _subscriptions(o: Overview) -> str:
    rows = [
        f"<tr><td>{escape(s.name)}</td><td>{escape(s.of)}</td>"
        f"<td>{escape(_duration(s.retention_ms))}</td><td>{_epoch_time(s.start_epoch)}</td></tr>"
        for s in o.subscriptions
    ]
    headers = ["subscription", "changes of", "retention", "since"]
    return _listing("subscriptions", headers, rows, "No subscriptions.")


def _cdc(o: Overview) -> str:
    """The CDC tables (``rw_catalog.rw_cdc_sources``): where each is, how far behind, how fast."""

    def num(v: Any, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    rows = [
        f"<tr><td>{escape(c.table_name)}</td><td>{escape(c.upstream_table)}</td>"
        f"<td>{escape(c.slot_name)}</td><td>{escape(c.phase)}</td>"
        f"<td class='num'>{c.rows_copied:,}</td><td>{escape(c.committed_lsn or '')}</td>"
        f"<td class='num'>{'' if c.lag_bytes is None else format_bytes(c.lag_bytes)}</td>"
        f"<td class='num'>{num(c.lag_seconds, '.1f')}</td>"
        f"<td class='num'>{num(c.rows_per_second, ',.1f')}</td>"
        f"<td class='error'>{escape(c.last_error or '')}</td>"
        f"<td>{escape(str(c.last_error_at or '')[:19])}</td></tr>"
        for c in o.cdc
    ]
    headers = ["table", "upstream", "slot", "phase", "rows copied", "committed position", "lag"]
    headers += ["lag (s)", "rows/s", "last error", "at"]
    return _listing("cdc-sources", headers, rows, "No CDC tables.")


def _duration(ms: int) -> str:
    seconds = ms / 1000
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} s"


def _error_records(o: Overview) -> str:
    rows = [
        f"<tr><td>{escape(e.relation)}</td><td>{escape(e.kind)}</td><td>{escape(e.executor)}</td>"
        f"<td>{escape(e.sqlstate)}</td><td class='error'>{escape(e.message)}</td>"
        f"<td class='num'>{e.count:,}</td><td><code>{escape(e.sample[:120])}</code></td>"
        f"<td>{escape(e.last_seen)}</td></tr>"
        for e in o.errors
    ]
    headers = ["relation", "type", "executor", "sqlstate", "message", "count", "sample row", "last seen"]
    return _listing("error-records", headers, rows, "No errors survived by streaming jobs.")


def _errors(o: Overview) -> str:
    if not o.failures:
        return "<p id='errors'>No streaming errors.</p>"
    rows = [
        f"<tr><td>{f.epoch}</td><td>{_epoch_time(f.epoch)}</td><td class='error'>{escape(f.error)}</td></tr>"
        for f in reversed(o.failures)
    ]
    return _table("errors", ["epoch", "time", "error"], rows)


def overview_page(db: Database) -> str:
    o = overview(db)
    body = (
        f"<p>Last committed epoch <b>{o.committed_epoch}</b> ({_epoch_time(o.committed_epoch)}).</p>"
        f"<h2>Relations</h2>{_relations(o)}"
        f"<h2>Epochs</h2>{epoch_timeline(o.epochs, o.failures)}"
        f"<h2>Subscriptions</h2>{_subscriptions(o)}"
        f"<h2>Streaming errors</h2>{_error_records(o)}"
        f"<h3>Failed epochs</h3>{_errors(o)}"
        f"<h2>Backfill progress</h2>{_backfills(o)}"
        f"<h2>CDC tables</h2>{_cdc(o)}"
        f"<h2>State tables</h2>{_state_tables(o)}"
        f"<h2>Functions</h2>{_functions(o)}"
    )
    return _page("piestream dashboard", body, refresh=True)


def job_page(db: Database, name: str) -> str | None:
    g: JobGraph | None = job_graph(db, name)
    if g is None:
        return None
    o = overview(db)
    rel = g.relation
    body = (
        f"<p>{escape(rel.kind.value)} <b>{escape(rel.name)}</b> · job {rel.job_id} · "
        f"{len(g.fragments)} fragments</p><pre><code>{escape(rel.definition)}</code></pre>"
        f"<h2>Fragment graph</h2>{fragment_graph(g.fragments, g.upstream, g.edges, o.table_names)}"
    )
    return _page(f"{rel.kind.value} {rel.name}", body)
