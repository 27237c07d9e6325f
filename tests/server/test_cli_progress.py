"""`piestream sql -f` draws a progress bar (statements done / total) when stderr is a terminal,
and nothing when it is not (issue 16 §6). The terminal is a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path


def _run(tmp_path: Path, script: Path, *, tty: bool) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "piestream.cli", "sql", "--embedded", "--runner", "local"]
    cmd += ["--barrier-interval", "0.05", "--data-dir", str(tmp_path / "data"), "-f", str(script)]
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm"}
    if not tty:
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        return p.stdout, p.stderr
    master, slave = pty.openpty()
    p2 = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out, _ = p2.communicate(timeout=300)
    os.close(master)
    assert p2.returncode == 0
    return out, b"".join(chunks).decode(errors="replace")


def test_sql_file_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    n = 40
    lines = ["CREATE TABLE p (k INT PRIMARY KEY, v INT);"]
    lines += [f"INSERT INTO p VALUES ({i}, {i * i});" for i in range(n)]
    lines.append("SELECT count(*) AS n FROM p;")
    script = tmp_path / "long.sql"
    script.write_text("\n".join(lines) + "\n")

    out, err = _run(tmp_path, script, tty=True)
    assert f" {n}\n(1 row)" in out  # results on stdout as always
    total = n + 2
    counts = [int(m) for m in re.findall(rf"(\d+)/{total}", err)]
    assert counts and max(counts) == total, err[-2000:]  # the bar counted every statement
    assert len(set(counts)) >= 2  # and moved
    assert "statements" in err or "INSERT INTO p" in err

    (tmp_path / "data").rename(tmp_path / "data-1")
    out2, err2 = _run(tmp_path, script, tty=False)
    assert out2 == out
    assert f"/{total}" not in err2 and "\r" not in err2 and "\x1b[" not in err2
