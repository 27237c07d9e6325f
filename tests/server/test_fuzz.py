"""SQL and protocol fuzzing against a real `piestream serve` process.

Random, mutated and invalid statements (`sql_fuzz.py`) go through psycopg, alternately over the
simple and the extended query protocol; then random protocol bytes go over raw sockets. The
test checks, for every statement:

* the server process is alive and the connection still works;
* a statement that fails gets an ErrorResponse with a SQLSTATE, whose text holds no traceback,
  and the SQLSTATE is not XX000 (an internal error is a bug in piestream);
* after a failed statement the catalog (relations, columns, MV definitions, sinks) and the row
  count of every table and MV are exactly as before;
* no statement runs into statement_timeout (nothing hangs on these tiny tables).

CI runs a short version; ``--soak`` runs 10,000 statements and 2,000 protocol blobs and prints
the figures.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgwire_helpers import error_fields, startup
from server_proc import ServerProcess, start_server
from sql_fuzz import Fuzzer, Stmt, live_relations, protocol_blob, relations_from_catalog

TRACE_WORDS = ("Traceback", 'File "', "most recent call last", "[piestream-error:")
CATALOG_SQL = (
    "SELECT c.relname, c.relkind, a.attname, a.atttypid FROM pg_catalog.pg_class c "
    "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
)


class Findings:
    """What the fuzzer found; the test fails with all of it at once."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.sqlstates: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()

    def add(self, what: str, stmt: Stmt | None = None, extra: object = "") -> None:
        text = f"{what}: {stmt.sql[:300]!r} ({stmt.kind})" if stmt else what
        self.items.append(f"{text} {extra}".strip())


def _snapshot(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """The catalog as clients see it, and the row count of every table and MV.

    The counts come back in one statement (a UNION ALL of one count per relation), so a snapshot
    costs four round trips however many relations there are; the fuzzer keeps that number
    bounded (`sql_fuzz.MAX_LIVE`)."""
    cols = sorted(conn.execute(CATALOG_SQL).fetchall(), key=str)
    mvs = sorted(conn.execute("SELECT matviewname, definition FROM pg_matviews").fetchall())
    sinks = sorted(conn.execute("SHOW SINKS").fetchall())
    names = sorted({r[0] for r in cols if r[1] in ("r", "m")})
    counts: dict[str, int] = {}
    if names:
        union = " UNION ALL ".join(
            f'SELECT CAST({i} AS INT) AS i, count(*) AS n FROM "{name}"' for i, name in enumerate(names)
        )
        for at, n in conn.execute(union).fetchall():  # type: ignore[arg-type]
            counts[names[at]] = n
    return cols, mvs, sinks, counts


def _clean(e: psycopg.Error) -> str | None:
    """Why the error is not a clean PostgreSQL error, or None if it is."""
    if e.sqlstate is None or len(e.sqlstate) != 5:
        return f"no SQLSTATE ({type(e).__name__}: {e})"
    d = e.diag
    for text in (d.message_primary, d.message_detail, d.message_hint):
        if text and any(w in text for w in TRACE_WORDS):
            return f"traceback in the error text: {text[:500]!r}"
    if e.sqlstate == "XX000":
        return f"internal error: {d.message_primary}"
    if e.sqlstate == "57014":
        return f"statement timed out (a hang?): {d.message_primary}"
    return None


def _connect(server: ServerProcess) -> psycopg.Connection[Any]:
    conn = psycopg.connect(server.dsn, autocommit=True, connect_timeout=20)
    conn.execute("SET statement_timeout = '30s'")
    return conn


def fuzz_statements(server: ServerProcess, n: int, seed: int, findings: Findings) -> dict[str, Any]:
    conn = _connect(server)
    simple = psycopg.ClientCursor(conn)
    fuzzer = Fuzzer(seed)
    state = _snapshot(conn)
    slowest = (0.0, "")
    failed = 0
    started = time.monotonic()
    for i in range(n):
        stmt = fuzzer.statement(i, relations_from_catalog(state[0]), live_relations(state[0]))
        findings.kinds[stmt.kind] += 1
        t0 = time.monotonic()
        error: psycopg.Error | None = None
        try:
            if i % 2:
                simple.execute(stmt.sql)  # type: ignore[arg-type]
            else:
                conn.execute(stmt.sql)  # type: ignore[arg-type]
        except psycopg.Error as e:
            error = e
        elapsed = time.monotonic() - t0
        slowest = max(slowest, (elapsed, stmt.sql[:200]))
        if not server.alive():
            findings.add("the server died", stmt, server.log())
            break
        if conn.closed or conn.broken:
            findings.add("the connection broke", stmt, error)
            conn = _connect(server)
            simple = psycopg.ClientCursor(conn)
            state = _snapshot(conn)
            continue
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
        if error is None:
            if "SET" in stmt.sql.upper() or "DISCARD" in stmt.sql.upper():
                conn.execute("RESET ALL")
                conn.execute("SET statement_timeout = '30s'")
            state = _snapshot(conn)
            continue
        failed += 1
        findings.sqlstates[error.sqlstate or "none"] += 1
        why = _clean(error)
        if why:
            findings.add(why, stmt)
        after = _snapshot(conn)
        if after != state:
            findings.add("a failed statement changed the catalog or data", stmt, _diff(state, after))
            state = after
    conn.close()
    return {
        "statements": float(n),
        "failed": float(failed),
        "seconds": time.monotonic() - started,
        "slowest_s": slowest[0],
        "slowest_sql": slowest[1],  # type: ignore[dict-item]
    }


def _diff(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    out = []
    for name, b, a in zip(("columns", "mvs", "sinks", "counts"), before, after, strict=True):
        if a == b:
            continue
        if isinstance(a, dict):
            out.append(
                f"{name}: {[(k, b.get(k), a.get(k)) for k in sorted({*a, *b}) if a.get(k) != b.get(k)]}"
            )
        else:
            gone, new = sorted({*map(str, b)} - {*map(str, a)}), sorted({*map(str, a)} - {*map(str, b)})
            out.append(f"{name}: -{gone} +{new}")
    return "; ".join(out)


def _read_messages(
    sock: socket.socket, wait: float, until: bytes | None = None
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Messages the server sent until it closed the connection, or sent a message of kind
    `until`, or `wait` seconds passed; and whether it closed the connection."""
    sock.settimeout(wait)
    buf = b""
    closed = False
    deadline = time.monotonic() + wait
    msgs: list[tuple[bytes, bytes]] = []
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, OSError):
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while len(buf) >= 5:
            (length,) = struct.unpack("!i", buf[1:5])
            if length < 4 or len(buf) < 1 + length:
                break
            msgs.append((buf[:1], buf[5 : 1 + length]))
            buf = buf[1 + length :]
        if until is not None and any(kind == until for kind, _ in msgs):
            break
    return msgs, closed


def fuzz_protocol(server: ServerProcess, n: int, seed: int, findings: Findings) -> None:
    r = random.Random(seed)
    for i in range(n):
        with_startup, blob = protocol_blob(r)
        try:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        except OSError as e:
            findings.add(f"protocol blob {i}: cannot connect: {e}")
            break
        try:
            if with_startup:
                sock.sendall(startup())
                _read_messages(sock, 5.0, until=b"Z")  # up to ReadyForQuery
            with contextlib.suppress(OSError):  # the server may have hung up on an earlier part
                sock.sendall(blob)
                # the end of our side: the server answers every whole message of the blob, then
                # sees the end and hangs up, so its answers are all read without a fixed wait
                sock.shutdown(socket.SHUT_WR)
            msgs, _ = _read_messages(sock, 5.0)
        finally:
            sock.close()
        for kind, body in msgs:
            if kind != b"E":
                continue
            f = error_fields(body)
            code, text = f.get("C", ""), f.get("M", "") + f.get("D", "")
            if len(code) != 5 or code == "XX000" or any(w in text for w in TRACE_WORDS):
                findings.add(f"protocol blob {i} ({blob[:60]!r}): bad error {f}")
        if not server.alive():
            findings.add(f"protocol blob {i} killed the server: {blob[:200]!r}", None, server.log())
            return
        if i % 50 == 49:
            with psycopg.connect(server.dsn, autocommit=True, connect_timeout=20) as c:
                assert c.execute("SELECT 1").fetchone() == (1,)


def _run(tmp_path: Path, statements: int, blobs: int, seed: int) -> None:
    server = start_server(tmp_path / "data", "--runner", "local", "--barrier-interval", "0.05")
    findings = Findings()
    try:
        figures = fuzz_statements(server, statements, seed, findings)
        fuzz_protocol(server, blobs, seed, findings)
        alive = server.alive()
        if alive:  # still answering, and its catalog still opens after a restart
            with psycopg.connect(server.dsn, autocommit=True) as c:
                before = _snapshot(c)
            server.stop()
            server = start_server(tmp_path / "data", "--runner", "local", "--barrier-interval", "0.05")
            with psycopg.connect(server.dsn, autocommit=True) as c:
                assert _snapshot(c) == before
    finally:
        server.stop()
    print(
        f"\nSQL fuzz: {statements} statements ({dict(findings.kinds)}), {int(figures['failed'])} failed "
        f"with {len(findings.sqlstates)} distinct SQLSTATEs, {blobs} protocol blobs, "
        f"{figures['seconds']:.1f} s, slowest statement {figures['slowest_s']:.2f} s; "
        f"SQLSTATEs: {dict(findings.sqlstates.most_common())}"
    )
    assert alive
    assert not findings.items, "\n".join(findings.items[:60])


def test_sql_fuzz_short(tmp_path: Path) -> None:
    _run(tmp_path, statements=500, blobs=120, seed=1)


@pytest.mark.timeout(3600)  # a soak runs longer than the suite's 900 s per test
@pytest.mark.soak
def test_sql_fuzz_soak(tmp_path: Path) -> None:
    _run(tmp_path, statements=10_000, blobs=2_000, seed=2)
