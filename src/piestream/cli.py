"""The `piestream` command line: serve, sql, demo."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

DEFAULT_DATA_DIR = "./piestream-data"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4566

EPILOG = """\
getting started:
  piestream serve --demo              start the server on 127.0.0.1:4566 with a live demo
  psql -h 127.0.0.1 -p 4566 -d dev -U root
  piestream sql "SELECT * FROM bids_per_auction ORDER BY bids DESC LIMIT 5"
  piestream bench nexmark --queries q0,q5 --events 200000

Run `piestream COMMAND --help` for the options of a command.
"""


# -- data directory lock ------------------------------------------------------------------------


@contextlib.contextmanager
def data_dir_lock(data_dir: str) -> Iterator[None]:
    """One piestream process per data directory (the Database holds the lock): a second `serve`
    (or embedded `sql`) fails fast with a hint instead of a traceback; so does a data directory
    that cannot be opened (another object store, an unreachable one)."""
    from piestream.common.errors import PiestreamError, clean_text
    from piestream.server.database import DataDirectoryInUse

    try:
        yield
    except DataDirectoryInUse as e:
        raise SystemExit(
            f"piestream: {e.message} (connect to its server instead: piestream sql --host ... --port ...)"
        ) from None
    except PiestreamError as e:
        hint = f" ({e.hint})" if e.hint else ""
        raise SystemExit(f"piestream: cannot open {data_dir}: {clean_text(e.message)}{hint}") from None


def _open_database(args: argparse.Namespace) -> Any:
    from piestream.server.database import Database, DatabaseConfig
    from piestream.stream.executor import StreamingConfig

    config = DatabaseConfig(
        runner=args.runner,
        barrier_interval=args.barrier_interval,
        parallelism=args.parallelism,
        object_store_url=args.object_store,
    )
    if getattr(args, "backfill_rows_per_epoch", None):
        config.streaming = StreamingConfig(backfill_rows_per_epoch=max(1, args.backfill_rows_per_epoch))
    spark = None
    if args.runner != "local" and getattr(args, "master", None):
        from piestream.runtime.spark import spark_session

        spark = spark_session(args.master)
    return Database(args.data_dir, spark=spark, config=config)


# -- serve --------------------------------------------------------------------------------------


def _loopback_host(host: str) -> bool:
    """Whether a listen address is this host only (a name is resolved; 0.0.0.0 / :: are not)."""
    from piestream.server.pgwire.tls import is_loopback

    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return all(is_loopback((info[4][0], 0)) for info in infos)


def _serve(args: argparse.Namespace) -> int:
    from piestream.server.pgwire import PgServer
    from piestream.server.pgwire.auth import read_password_file

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j reports every connection a Python thread opens or closes to the JVM at INFO: noise
    logging.getLogger("py4j").setLevel(logging.WARNING)
    auth = None
    if args.password_file:
        auth = {"method": args.auth_method, "users": read_password_file(args.password_file)}
    tls = None
    if bool(args.ssl_cert) != bool(args.ssl_key):
        print("piestream: --ssl-cert and --ssl-key go together", file=sys.stderr)
        return 2
    if args.require_ssl_remote and not args.ssl_cert:
        print("piestream: --require-ssl-remote needs --ssl-cert and --ssl-key", file=sys.stderr)
        return 2
    if args.ssl_cert:
        from piestream.common.errors import PiestreamError
        from piestream.server.pgwire.tls import TlsConfig

        tls = TlsConfig(args.ssl_cert, args.ssl_key, require_remote=args.require_ssl_remote)
        try:
            tls.context()
        except PiestreamError as e:
            print(f"piestream: {e.message}", file=sys.stderr)
            return 2
    with data_dir_lock(args.data_dir):
        print(f"piestream: opening {Path(args.data_dir).resolve()} (runner: {args.runner}) ...", flush=True)
        db = _open_database(args)
        server = PgServer(db, host=args.host, port=args.port, auth=auth, tls=tls)
        try:
            server.start()
        except OSError as e:
            db.close()
            print(f"piestream: cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
            return 1
        dashboard = None
        if not args.no_dashboard:
            from piestream.server.dashboard import Dashboard

            try:
                dashboard = Dashboard(
                    db,
                    host=args.host,
                    port=args.dashboard_port,
                    pgwire=server,
                    ssl_context=server.ssl_context,
                    # beyond this host, with passwords on: a role's name and password
                    require_login=server.authenticator is not None and not _loopback_host(args.host),
                ).start()
            except OSError as e:
                print(f"piestream: no dashboard: cannot listen on port {args.dashboard_port}: {e.strerror}")
        feeder = None
        if args.demo:
            from piestream.server.live_demo import start_demo, try_this

            feeder = start_demo(db)
            print("piestream: demo loaded (tables and materialized views are updating)")
            print(try_this(db))

        stopping: list[threading.Thread] = []

        def stop_all() -> None:
            if feeder is not None:
                feeder.stop()
            if dashboard is not None:
                dashboard.stop()
            server.stop()

        def shutdown(signum: int, frame: object) -> None:
            if stopping:  # a second Ctrl-C: the user does not want to wait
                print("\npiestream: exiting now", flush=True)
                os._exit(1)
            print(
                "\npiestream: shutting down (finishing running statements; Ctrl-C again to force) ...",
                flush=True,
            )
            stopping.append(threading.Thread(target=stop_all, name="piestream-shutdown"))
            stopping[0].start()

        signal.signal(signal.SIGINT, shutdown)
        signal.signal(signal.SIGTERM, shutdown)
        print(
            f"piestream: ready on {args.host}:{server.port} — connect with: "
            f"psql -h {args.host} -p {server.port} -d dev -U root"
            + (f"; dashboard: {dashboard.url}" if dashboard is not None else ""),
            flush=True,
        )
        server.serve_forever()
    print("piestream: stopped")
    return 0


# -- sql ----------------------------------------------------------------------------------------


def _numeric_oid(oid: int) -> bool:
    return oid in (20, 21, 23, 26, 700, 701, 1700)


def format_table(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str | None]]) -> str:
    """psql's aligned format: centred headers, numbers right-aligned, ``(n rows)``."""
    names = [c for c, _ in columns]
    cells = [["" if v is None else v for v in r] for r in rows]
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    lines = [" " + " | ".join(n.center(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    lines.append("-" + "-+-".join("-" * w for w in widths) + "-")
    for r in cells:
        parts = []
        for (_, oid), v, w in zip(columns, r, widths, strict=True):
            parts.append(v.rjust(w) if _numeric_oid(oid) else v.ljust(w))
        lines.append(" " + " | ".join(parts).rstrip())
    n = len(rows)
    lines.append(f"({n} row{'' if n == 1 else 's'})")
    return "\n".join(lines)


def _print_results(results: Sequence[Any], out: IO[str]) -> None:
    for r in results:
        for notice in r.notices:
            print(f"NOTICE:  {notice}", file=sys.stderr)
        if r.columns:
            print(format_table(r.columns, r.rows), file=out)
            print(file=out)
        elif r.tag:
            print(r.tag, file=out)


def _server_reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run_remote(args: argparse.Namespace, sql: str) -> int:
    from piestream.common.errors import PiestreamError
    from piestream.progress_bar import ProgressBar
    from piestream.server.pgwire.client import SimpleClient
    from piestream.server.pgwire.statements import split_statements

    password = os.environ.get("PGPASSWORD") if args.password is None else args.password
    client = SimpleClient(args.host, args.port, args.user, args.database, password)
    pieces = [p for _, p in split_statements(sql)] if args.file else [sql]
    try:
        with ProgressBar(len(pieces), "statements") as bar:
            if not bar.enabled:  # one Query message, as before
                pieces = [sql]
            for piece in pieces:
                # a bar on a terminal: one statement at a time, as psql -f sends them
                bar.describe(_short(piece))
                _print_results(client.query(piece), sys.stdout)
                bar.advance()
    except PiestreamError as e:
        _print_results(getattr(e, "results", []), sys.stdout)
        _print_error(e)
        return 1
    finally:
        client.close()
    return 0


def _short(sql: str, width: int = 40) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _print_error(e: Any) -> None:
    from piestream.common.errors import clean_text

    print(f"ERROR:  {clean_text(e.message)}", file=sys.stderr)
    if e.detail:
        print(f"DETAIL:  {clean_text(e.detail)}", file=sys.stderr)
    if e.hint:
        print(f"HINT:  {e.hint}", file=sys.stderr)


def _run_embedded(args: argparse.Namespace, sql: str) -> int:
    from piestream.common.errors import PiestreamError, client_error
    from piestream.common.text import format_datum
    from piestream.progress_bar import ProgressBar
    from piestream.server.catalog import CatalogContext, CatalogViews
    from piestream.server.pgwire.client import TextResult
    from piestream.server.pgwire.statements import prepare_script

    with data_dir_lock(args.data_dir):
        db = _open_database(args)
        session = db.session()
        stack = contextlib.ExitStack()
        try:
            catalog = CatalogViews(lambda: session.catalog().relations())
            ctx = CatalogContext(user=args.user, database=args.database, settings=session.settings)
            script = prepare_script(sql, lambda name: session.catalog().get_relation(name) is not None)
            script = [p for p in script if not p.empty]
            bar = ProgressBar(len(script), "statements", enabled=None if args.file else False)
            stack.enter_context(bar)
            for p in script:
                bar.describe(_short(p.text))
                if p.catalog:
                    result = catalog.execute(p.text, (), ctx)
                else:
                    assert p.stmt is not None
                    result = session.execute_statement(p.stmt)
                types = [t for _, t in result.columns]
                rows = [
                    tuple(None if v is None else format_datum(v, t) for v, t in zip(row, types, strict=False))
                    for row in result.rows
                ]
                text = TextResult(
                    [(n, t.pg_oid) for n, t in result.columns], rows, result.tag, result.notices
                )
                _print_results([text], sys.stdout)
                bar.advance()
        except PiestreamError as e:
            stack.close()
            _print_error(e)
            return 1
        except Exception as e:  # a bug: one line for the user, the traceback to the debug log
            stack.close()
            logging.getLogger(__name__).debug("statement failed", exc_info=True)
            _print_error(client_error(e))
            return 1
        finally:
            stack.close()  # the progress bar
            session.close()  # a transaction block left open is rolled back, as at a disconnect
            db.close()
    return 0


def _sql(args: argparse.Namespace) -> int:
    if args.file:
        sql = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    elif args.query:
        sql = args.query
    else:
        print("piestream sql: give a query or -f FILE", file=sys.stderr)
        return 2
    if not args.embedded and _server_reachable(args.host, args.port):
        return _run_remote(args, sql)
    if args.server_only:
        print(f"piestream sql: no server on {args.host}:{args.port}", file=sys.stderr)
        return 1
    return _run_embedded(args, sql)


# -- demo ---------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from piestream.demo import run_demo

    run_demo(args.data_dir, epochs=args.epochs, master=args.master)
    return 0


# -- bench --------------------------------------------------------------------------------------


def _bench_nexmark(args: argparse.Namespace) -> int:
    from piestream.nexmark_bench import run_from_args

    return run_from_args(args)


def bench_nexmark_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `piestream bench nexmark` (here: the CLI starts without importing the bench)."""
    p.add_argument("--queries", default="q0,q1,q2", help="comma-separated (q0,q5), ranges (q0-q9) or 'all'")
    p.add_argument("--events", type=int, default=1_000_000, help="events per query (default 1,000,000)")
    p.add_argument(
        "--runner",
        choices=["spark", "spark-shuffle", "spark-leased", "local"],
        default="spark",
        help="piestream's runner (default spark: one single-stage Spark job per epoch)",
    )
    p.add_argument("--parallelism", type=int, default=2, help="actors per fragment and source splits")
    p.add_argument(
        "--sink",
        choices=["blackhole", "mv"],
        default="blackhole",
        help="each query as a blackhole sink or an MV",
    )
    p.add_argument(
        "--epoch-events", type=int, default=100_000, help="events each source reads per epoch at most"
    )
    p.add_argument(
        "--event-time-rate",
        type=int,
        default=None,
        help="events per second of event time of piestream's sources (nexmark.events.per.sec; "
        "default 10,000; the Spark baseline keeps the default): q11's sessions need bids spread "
        "over more than the 4 s watermark delay plus the 10 s gap",
    )
    p.add_argument(
        "--spark-baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run each query on Spark's own operators (default on)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per query before it is stopped")
    p.add_argument("--profile", action="store_true", help="cProfile piestream's run of each query")
    p.add_argument("--master", default=None, help="Spark master (default local[2])")


# -- parser -------------------------------------------------------------------------------------


def _engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"where tables, MVs and the catalog live (default {DEFAULT_DATA_DIR})",
    )
    p.add_argument(
        "--runner",
        choices=["spark", "spark-shuffle", "spark-leased", "local"],
        default="spark",
        help="run each streaming epoch as one Spark job of one stage (spark, the default), as one Spark "
        "job with a Spark shuffle per exchange (spark-shuffle), on leased long-lived Spark jobs "
        "(spark-leased: epochs of ms; other Spark jobs of the session wait up to the running epoch) "
        "or in-process (local: quick start, no Java needed)",
    )
    p.add_argument(
        "--master", default=None, help="Spark master (default local[2] or $PIESTREAM_SPARK_MASTER)"
    )
    p.add_argument(
        "--barrier-interval",
        type=float,
        default=1.0,
        help="seconds between checkpoints (epochs); default 1.0",
    )
    p.add_argument(
        "--parallelism",
        type=int,
        default=None,
        help="actors per fragment of new streaming jobs, FIXED (default: ADAPTIVE, as many as the "
        "cluster has task slots, following executors as they join and leave)",
    )
    p.add_argument(
        "--backfill-rows-per-epoch",
        type=int,
        default=None,
        metavar="N",
        help="existing rows a new MV's backfill reads per epoch per actor (default 50,000)",
    )
    p.add_argument(
        "--object-store",
        default=os.environ.get("PIESTREAM_OBJECT_STORE"),
        metavar="URL",
        help="where tables and MVs are stored (default DATA_DIR/objects, or $PIESTREAM_OBJECT_STORE); "
        "on a cluster an S3-compatible store: s3://BUCKET/PREFIX?endpoint=URL&region=..&access_key=.."
        "&secret_key=.. (or the usual AWS_* variables on every node)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="piestream",
        description="piestream: a streaming database in Python. Create tables and materialized views "
        "in PostgreSQL-flavoured SQL; piestream keeps every view up to date incrementally as data "
        "changes (on Spark, over a Hummock-style LSM on local or object storage), and any PostgreSQL "
        "client (psql, psycopg, SQLAlchemy, pandas) can query it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser(
        "serve",
        help="start the SQL server (PostgreSQL protocol, 127.0.0.1:4566)",
        description="Start piestream and serve SQL over the PostgreSQL wire protocol. Stop with Ctrl-C: "
        "running statements finish, then the data directory is closed cleanly.",
    )
    _engine_options(s)
    s.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    s.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}, as RisingWave)"
    )
    s.add_argument(
        "--demo", action="store_true", help="create demo tables and MVs and keep feeding them rows"
    )
    s.add_argument(
        "--dashboard-port",
        type=int,
        default=5691,
        help="port of the web dashboard, on --host (default 5691, as RisingWave)",
    )
    s.add_argument("--no-dashboard", action="store_true", help="do not serve the web dashboard")
    s.add_argument(
        "--password-file",
        default=None,
        help="require passwords: a file of user:password lines (default: no authentication)",
    )
    s.add_argument(
        "--auth-method",
        choices=["scram-sha-256", "md5"],
        default="scram-sha-256",
        help="with --password-file",
    )
    s.add_argument(
        "--ssl-cert", default=None, help="TLS certificate chain (PEM): clients may use sslmode=require"
    )
    s.add_argument("--ssl-key", default=None, help="the certificate's private key (PEM)")
    s.add_argument(
        "--require-ssl-remote",
        action="store_true",
        help="with --ssl-cert: refuse unencrypted connections from other hosts than this one (28000)",
    )
    s.set_defaults(fn=_serve)

    q = sub.add_parser(
        "sql",
        help='run SQL: piestream sql "SELECT ..." or piestream sql -f script.sql',
        description="Run SQL and print the results as tables. Talks to the server on --host/--port when one "
        "is running there; otherwise opens --data-dir itself (embedded) for the duration of the script.",
    )
    q.add_argument("query", nargs="?", help="SQL text (several statements separated by ;)")
    q.add_argument("-f", "--file", help="read SQL from a file (- for stdin)")
    q.add_argument("--host", default=DEFAULT_HOST, help=f"server address (default {DEFAULT_HOST})")
    q.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"server port (default {DEFAULT_PORT})")
    q.add_argument("-U", "--user", default="root", help="user name (default root)")
    q.add_argument("-d", "--database", default="dev", help="database name (default dev)")
    q.add_argument("--password", default=None, help="password, if the server wants one (or set $PGPASSWORD)")
    mode = q.add_mutually_exclusive_group()
    mode.add_argument("--embedded", action="store_true", help="never connect to a server; open --data-dir")
    mode.add_argument("--server-only", action="store_true", help="fail unless a server is reachable")
    _engine_options(q)
    q.set_defaults(fn=_sql)

    d = sub.add_parser(
        "demo", help="run a short live demo on embedded defaults (Spark local mode, local data dir)"
    )
    d.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, help=f"data directory (default {DEFAULT_DATA_DIR})"
    )
    d.add_argument("--epochs", type=int, default=5, help="how many epochs to run (default 5)")
    d.add_argument("--master", default=None, help="Spark master (default local[2])")
    d.set_defaults(fn=_demo)

    b = sub.add_parser("bench", help="benchmarks: piestream bench nexmark --queries q0,q1 --events N")
    bsub = b.add_subparsers(dest="bench", metavar="BENCHMARK")
    nx = bsub.add_parser(
        "nexmark",
        help="the Nexmark queries, side by side with Spark",
        description="Run Nexmark queries (RisingWave's SQL, as blackhole sinks or MVs) over exactly "
        "--events generated events each and print events/s, events/s per core, epoch latency p50/p99 "
        "and state size, next to the same query on Spark Structured Streaming (or a Spark batch "
        "recompute where Spark streaming cannot run it).",
    )
    bench_nexmark_arguments(nx)
    nx.set_defaults(fn=_bench_nexmark)

    def bench_help(_args: argparse.Namespace) -> int:
        b.print_help()
        return 0

    b.set_defaults(fn=bench_help)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
