"""The process the lake-sink SIGKILL test kills: runs random DML on a database with Delta and
Iceberg sinks, and kills itself with SIGKILL on the KILL_AT-th Delta commit, either just before
the lake commit ("before") or just after it, before the staged files are cleaned up ("after").

    python lake_crash_child.py DATA_DIR LAKE_DIR MODE KILL_AT SEED

Prints JSON lines: {"event": "killing", "mode": ..., "epoch": ..., "location": ...} right
before the kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    from lake_workload import statement

    from piestream.connectors import delta
    from piestream.server.database import Database, DatabaseConfig

    data, lake, mode, kill_at, seed = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
        int(sys.argv[5]),
    )
    original = delta.DeltaSinkTable.commit
    calls = [0]

    def commit(self: delta.DeltaSinkTable, epoch: int, table: object) -> None:
        calls[0] += 1
        if calls[0] == kill_at and mode == "before":
            _kill(mode, epoch, self.location, lake)
        original(self, epoch, table)  # type: ignore[arg-type]
        if calls[0] == kill_at and mode == "after":
            _kill(mode, epoch, self.location, lake)

    delta.DeltaSinkTable.commit = commit  # type: ignore[method-assign]
    db = Database(data, config=DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=2))
    s = db.session()
    rng = random.Random(seed)
    for i in range(10_000):
        s.execute(statement(rng, i))


def _kill(mode: str, epoch: int, location: str, lake: str) -> None:
    rel = os.path.relpath(location, lake)
    sys.stdout.write(json.dumps({"event": "killing", "mode": mode, "epoch": epoch, "location": rel}) + "\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
