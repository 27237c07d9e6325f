"""jsonb access on a column of `--rows` events: `->>`, `->` and `#>>` evaluated as bound
expressions over Arrow chunks of 8192 rows and over the whole column as one chunk (the numpy
scan of jsonb_scan.Layout), next to the anchor a
per-row `json.loads` loop (what decoding every value would cost; its output is not even jsonb
text). Events look like CDC / Kafka payloads: a few scalar fields and a nested object.

    .venv/bin/python bench/bench_jsonb.py [--rows 1000000]

Best of 3 wall-clock runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import random

import pyarrow as pa

from piestream.common.chunk import DataChunk
from piestream.common.text import jsonb_text, jsonb_value
from piestream.common.types import JSONB, VARCHAR, list_of
from piestream.expr import InputRef, bind_call, literal
from timing import best_of

#: rows per chunk, as executors see a column (and the whole column as one chunk)
CHUNK = 8192


def events(n: int) -> pa.Array:
    rng = random.Random(1)
    base = [
        jsonb_text(
            jsonb_value(
                json.dumps(
                    {
                        "id": i,
                        "user": f"user{rng.randrange(1000)}",
                        "kind": rng.choice(["click", "view", 'say "hi"']),
                        "price": round(rng.random() * 100, 2),
                        "ctx": {"ip": f"10.0.{i % 256}.{rng.randrange(256)}", "tags": ["a", "b"][: i % 3]},
                    }
                )
            )
        )
        for i in range(1000)
    ]
    return pa.array([base[i % 1000] for i in range(n)], pa.string())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    n = ap.parse_args().rows
    col = events(n)
    chunks = [DataChunk([col.slice(i, CHUNK)], length=min(CHUNK, n - i)) for i in range(0, n, CHUNK)]
    whole = [DataChunk([col], length=n)]
    j = InputRef(0, JSONB)
    cases = {
        "j ->> 'user'": bind_call("->>", [j, literal("user", VARCHAR)]),
        "j ->> 'kind' (escaped strings)": bind_call("->>", [j, literal("kind", VARCHAR)]),
        "j -> 'ctx'": bind_call("->", [j, literal("ctx", VARCHAR)]),
        "j #>> '{ctx,ip}'": bind_call("#>>", [j, literal(["ctx", "ip"], list_of(VARCHAR))]),
    }
    values = col.to_pylist()

    def loads_loop() -> list[object]:
        return [json.loads(v).get("user") for v in values]

    anchor = best_of(loads_loop)
    print(f"{n} rows, {col.nbytes / 1e6:.0f} MB of jsonb text")
    print(f"{'case':<36}{'chunks':>8}{'s':>8}{'M rows/s':>10}{'x loads':>9}")
    print(f"{'per-row json.loads(v)[k] (anchor)':<36}{'':>8}{anchor:>8.3f}{n / anchor / 1e6:>10.2f}{1:>9.1f}")
    for name, e in cases.items():
        for label, cs in ((str(CHUNK), chunks), ("whole", whole)):
            t = best_of(lambda e=e, cs=cs: [e.eval(c) for c in cs])
            print(f"{name:<36}{label:>8}{t:>8.3f}{n / t / 1e6:>10.2f}{anchor / t:>9.1f}")


if __name__ == "__main__":
    main()
