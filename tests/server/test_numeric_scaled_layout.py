"""Issue 14's per-value-scale NUMERIC end to end, while it is behind the migration scaffold
(PIESTREAM_NUMERIC_LAYOUT=scaled, read once per process in common/types.py): the cases in
`numeric_scaled_cases.py` run in a subprocess under that layout, so the default suite keeps
checking it. When the layout becomes the only one, the cases move here and this driver goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_numeric_with_display_scales_matches_postgresql_under_the_scaled_layout(tmp_path: Path) -> None:
    env = {**os.environ, "PIESTREAM_NUMERIC_LAYOUT": "scaled"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    cmd += ["--rootdir", str(HERE), "--basetemp", str(tmp_path / "t"), str(HERE / "numeric_scaled_cases.py")]
    done = subprocess.run(cmd, check=False, cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "8 passed" in done.stdout, done.stdout[-2000:]
