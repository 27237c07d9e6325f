"""The function registry loads its kernels once, and no thread sees it half loaded.

Runs in a fresh interpreter (the registry of this test process is long loaded): threads bind and
evaluate `k % 3 = 1` at the same moment, as sessions do on a server that just restarted."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import threading
    import pyarrow as pa
    from piestream.common.chunk import DataChunk
    from piestream.common.types import BIGINT
    from piestream.expr.bind import bind_call, literal
    from piestream.expr.expr import InputRef

    chunk = DataChunk([pa.array([1, 4, 5], pa.int64())])
    start = threading.Barrier(8)
    errors = []

    def run():
        start.wait()
        try:
            e = bind_call("=", [bind_call("%", [InputRef(0, BIGINT), literal(3)]), literal(1)])
            assert e.eval(chunk).to_pylist() == [True, True, False]
        except Exception as err:
            errors.append(repr(err))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(errors)
    """
)


def test_concurrent_first_use_sees_every_kernel() -> None:
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", CHILD], check=False, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", out.stdout
