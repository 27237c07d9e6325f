"""Kafka sink: one epoch of Nexmark-bid rows encoded and delivered in one transaction. Side by
side in one run: the JSON encoding per row (`json.dumps` of each row dict, the old way, the
anchor) against the per-column Arrow encoding the sink uses, then the sink's whole commit
(encode + produce + commit_transaction) to the Tansu broker of the dev extra.

    .venv/bin/python bench/bench_kafka_sink.py [--rows 1000000] [--format plain|upsert|debezium]

UPSERT and DEBEZIUM key the messages by ``auction`` (every row an insert, as an append-only MV's
changes are).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pyarrow as pa

from bench_kafka import bids
from bench_state_table import Clock, line
from piestream.connectors.formats.encode import row_json
from piestream.connectors.kafka.sink import SINK_FORMATS, KafkaSinkTable, create_marker_topic, encode_messages
from piestream.connectors.kafka.sink import validate_kafka_sink_options as validate

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "connectors"))
from kafka_broker import Broker  # the tests' broker launcher


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--format", choices=("plain", "upsert", "debezium"), default="plain")
    args = ap.parse_args()
    n, fmt = args.rows, args.format
    key = () if fmt == "plain" else ("auction",)
    data = bids(n)
    data = data.set_column(5, "date_time", data.column("date_time").cast(pa.timestamp("us")))
    with Clock() as rclk:
        per_row = [row_json(r) for r in data.to_pylist()]
    with Clock() as vclk:
        _, values = encode_messages(data, fmt, key, "bench")
    assert len(values) == len(per_row) == n
    broker = Broker()
    try:
        broker.create_topic("out", 1)
        o = {"topic": "out", "properties.bootstrap.server": broker.bootstrap, "format": fmt}
        opts = validate(o, "bench")
        create_marker_topic(opts)
        sink = KafkaSinkTable(opts, "bench", SINK_FORMATS[fmt], key)
        with Clock() as cclk:
            sink.commit(1, data)
        assert sink.last_epoch() == 1
    finally:
        broker.stop()
    print(f"{n:,} bid rows, FORMAT {fmt.upper()} ENCODE JSON; load average {os.getloadavg()}")
    line("anchor: json.dumps per row", n, rclk)
    line("encode_messages (per column, Arrow)", n, vclk)
    line("sink commit: encode + produce + commit", n, cclk, target=200_000)


if __name__ == "__main__":
    main()
