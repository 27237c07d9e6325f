"""PySpark's worker daemon, quiet when Spark stops.

Over Unix domain sockets (`spark.python.unix.domain.socket.enabled`), a reused Python worker
that is idle when its SparkContext stops finds the JVM's end already closed: the daemon's final
flush of the worker's output fails with EPIPE, and PySpark re-raises it, printing a traceback on
the server's stderr at every shutdown (over TCP the same write goes unnoticed). Nothing is lost
(the worker had no task), so this daemon ends such a worker quietly and is otherwise
`pyspark.daemon` unchanged (`spark.python.daemon.module` names it).
"""

from __future__ import annotations

import socket

from pyspark import daemon

_worker = daemon.worker


def _quiet_worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _worker(sock, authenticated)
    except BrokenPipeError:  # the JVM closed the connection: Spark is stopping
        return 1


daemon.worker = _quiet_worker

if __name__ == "__main__":
    daemon.manager()
