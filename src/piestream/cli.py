"""The `piestream` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

DEFAULT_DATA_DIR = "./piestream-data"


def _demo(args: argparse.Namespace) -> int:
    from piestream.demo import run_demo

    run_demo(args.data_dir, epochs=args.epochs, master=args.master)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="piestream",
        description="piestream: a streaming database in Python that keeps materialized views "
        "incrementally up to date, on Spark, over a Hummock-style LSM on object storage.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    d = sub.add_parser(
        "demo", help="run a short live demo on embedded defaults (Spark local mode, local data dir)"
    )
    d.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, help=f"data directory (default {DEFAULT_DATA_DIR})"
    )
    d.add_argument("--epochs", type=int, default=5, help="how many epochs to run (default 5)")
    d.add_argument("--master", default=None, help="Spark master (default local[2])")
    d.set_defaults(fn=_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
