"""The process the SIGKILL recovery tests kill: opens a data directory and runs SQL until killed.

    python crash_child.py DATA_DIR SEED START RUNNER [EXTRA_MV_NAME]

Prints one JSON object per line, flushed: {"event": "open"} once the database is open (recovery
done), {"event": "ready"}, then for every statement {"send": i, "sql": ..., "duck": ...} before
running it and {"ack": i} after it returned — for DML that is after the epoch holding it was
committed. Statement i is `sql_workload.statement(SEED, i)` from i = START on; with
EXTRA_MV_NAME, the 6th statement is instead a CREATE MATERIALIZED VIEW of that name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

EXTRA_MV_QUERY = "SELECT g, count(*) AS n, max(v) AS hi FROM a WHERE v >= 0 GROUP BY g"


def emit(**kw: object) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def main() -> None:
    from sql_workload import statement

    from piestream.server.database import Database, DatabaseConfig

    data_dir, seed, start, runner = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    extra_mv = sys.argv[5] if len(sys.argv) > 5 else None
    db = Database(data_dir, config=DatabaseConfig(runner=runner, barrier_interval=0.2, parallelism=2))
    emit(event="open")
    s = db.session()
    emit(event="ready")
    i = start
    while True:
        if extra_mv is not None and i == start + 5:
            sql = f"CREATE MATERIALIZED VIEW {extra_mv} AS {EXTRA_MV_QUERY}"
            emit(send=-1, sql=sql, ddl=extra_mv)
            s.execute(sql)
            emit(ack=-1)
        pg, duck = statement(seed, i)
        emit(send=i, sql=pg, duck=duck)
        s.execute(pg)
        emit(ack=i)
        i += 1


if __name__ == "__main__":
    main()
