"""Nexmark on piestream next to Spark: `piestream bench nexmark` with `make bench` defaults.

    .venv/bin/python bench/bench_nexmark.py [--quick] [piestream bench nexmark options ...]

Without options: every query, 200,000 events each, on the Spark runner, with the Spark baseline
(see `piestream bench nexmark --help`). `--quick` (as `make bench BENCH_ARGS=--quick` passes):
q0, q1 and q5 on 20,000 events. Later options override the defaults.
"""

from __future__ import annotations

import sys

from piestream.cli import main

DEFAULTS = ["--queries", "all", "--events", "200000", "--timeout", "300"]
QUICK = ["--queries", "q0,q1,q5", "--events", "20000", "--epoch-events", "10000"]

if __name__ == "__main__":
    args = sys.argv[1:]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    sys.exit(main(["bench", "nexmark", *(QUICK if quick else DEFAULTS), *args]))
