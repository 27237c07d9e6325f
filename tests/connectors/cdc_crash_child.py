"""The process the CDC kill -9 tests (postgres-cdc, mysql-cdc) kill: creates a CDC table (a small
per-epoch budget, so the snapshot takes many epochs) and an MV over it, and SIGKILLs itself once the committed
state shows the snapshot partly copied ("snapshot") or the stream reached ("stream").

    python cdc_crash_child.py DATA_DIR "WITH OPTIONS" snapshot|stream

The tests start it with `run_until_killed`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def run_until_killed(data: Path, with_options: str, kill_when: str) -> str:
    """Run this script on `data` until it SIGKILLs itself at `kill_when`; its output."""
    proc = subprocess.run(
        [sys.executable, __file__, str(data), with_options, kill_when],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert f"killing in {kill_when}" in proc.stdout, proc.stdout
    return proc.stdout


def main() -> None:
    from piestream.server.database import Database, DatabaseConfig

    data, options, when = sys.argv[1], sys.argv[2], sys.argv[3]
    table = options.split("table.name = '")[1].split("'")[0]
    db = Database(
        data, config=DatabaseConfig(runner="local", barrier_interval=0.05, background_compaction=False)
    )
    db.execute(
        f"CREATE TABLE {table} (id int PRIMARY KEY, cust int, amount numeric, note varchar) "
        f"WITH ({options}, max.rows.per.epoch = '200')"
    )
    db.execute(
        f"CREATE MATERIALIZED VIEW agg AS SELECT cust, count(*), sum(amount) FROM {table} GROUP BY cust"
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = db.execute(f"SELECT count(*) FROM {table}")[0].rows[0][0]
        if (when == "snapshot" and 400 <= n < 2500) or (when == "stream" and n == 3000):
            sys.stdout.write(f"killing in {when} at {n} rows\n")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)
    raise SystemExit("never reached the point to kill at")


if __name__ == "__main__":
    main()
