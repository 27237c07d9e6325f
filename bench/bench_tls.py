"""TLS connection set-up on loopback (issue target: ≤ 5 ms).

Starts a server with a throw-away self-signed certificate (`openssl req`, EC P-256), then opens
`--n` psycopg connections with sslmode=disable and with sslmode=require and prints the median
connect time of each and the difference (the TLS handshake and the SSLRequest round trip).

    .venv/bin/python bench/bench_tls.py [--n 50]

Wall-clock figures on a shared machine: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer
from piestream.server.pgwire.tls import TlsConfig


def connect_times(port: int, sslmode: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with psycopg.connect(f"host=127.0.0.1 port={port} user=root dbname=dev sslmode={sslmode}"):
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        crt, key = Path(d) / "s.crt", Path(d) / "s.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost"],
            check=True, capture_output=True,
        )  # fmt: skip
        db = Database(Path(d) / "db", config=DatabaseConfig(runner="local", barrier_interval=1.0))
        srv = PgServer(db, port=0, tls=TlsConfig(str(crt), str(key))).start()
        try:
            connect_times(srv.port, "require", 3)  # warm-up
            clear = statistics.median(connect_times(srv.port, "disable", args.n))
            tls = statistics.median(connect_times(srv.port, "require", args.n))
        finally:
            srv.stop()
    print(
        f"{args.n} connections: clear {clear * 1000:.2f} ms, TLS {tls * 1000:.2f} ms (median), "
        f"TLS set-up adds {(tls - clear) * 1000:.2f} ms; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
