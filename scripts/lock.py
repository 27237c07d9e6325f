"""Reads uv.lock for the set-up: the pinned uv wheel to bootstrap, with its hashes.

README's commands install every package from uv.lock with uv; uv itself must come first, so the
set-up asks pip for exactly the uv that the lock pins, hash-checked like every other package."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def uv_requirement(lock: Path) -> str:
    """`uv==X --hash=sha256:...` for every wheel of the locked uv (pip picks this platform's)."""
    data = tomllib.loads(lock.read_text())
    for pkg in data["package"]:
        if pkg["name"] == "uv":
            hashes = [w["hash"] for w in pkg.get("wheels", [])] + [pkg["sdist"]["hash"]]
            return f"uv=={pkg['version']} " + " ".join(f"--hash={h}" for h in hashes)
    raise SystemExit(f"{lock}: no uv package in the lock (it is a dev dependency in pyproject.toml)")


if __name__ == "__main__":
    print(uv_requirement(Path(sys.argv[1] if len(sys.argv) > 1 else "uv.lock")))
