"""Kill -9 a database mid-work: a child process runs statements, then a loop statement over and
over (formatted with its iteration `i`), printing the first value of each result (or `i` when it
has none); the test SIGKILLs it once a printed value satisfies `until`. Shared by the sources'
and sinks' exactly-once tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import sys, time
    from piestream.server.database import Database, DatabaseConfig
    db = Database(sys.argv[1], config=DatabaseConfig(runner="local", barrier_interval=0.05,
                                                     background_compaction=False))
    loop, pause = sys.argv[2], float(sys.argv[3])
    for stmt in sys.argv[4:]:
        db.execute(stmt)
    i = 0
    while True:
        rows = db.execute(loop.format(i=i))[0].rows
        print(rows[0][0] if rows else i, flush=True)
        i += 1
        time.sleep(pause)
    """
)


def kill_when(
    data: Path, stmts: Sequence[str], loop: str, until: Callable[[int], bool], pause: float = 0.02
) -> int:
    """Run the child on database `data` and SIGKILL it once `until(value)`; the last value."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), loop, str(pause), *stmts],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    last = -1
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            last = int(line)
            if until(last):
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    return last
