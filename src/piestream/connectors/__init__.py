"""piestream.connectors: sources (nexmark, datagen, file, kafka, postgres-cdc, mysql-cdc) and sinks
(parquet, blackhole).

Connectors register with the stream layer's registry (`piestream.stream.connector`) by name, so
the frontend can plan a source from a catalog entry, and an actor build its readers and writers,
without importing this layer.
"""

from __future__ import annotations

from piestream.connectors.cdc.mysql import mysql_cdc_connector
from piestream.connectors.cdc.postgres import postgres_cdc_connector
from piestream.connectors.datagen import datagen_connector
from piestream.connectors.files import file_connector
from piestream.connectors.kafka.reader import KAFKA_FORMATS, kafka_connector
from piestream.connectors.nexmark.reader import nexmark_connector
from piestream.connectors.nexmark.tables_sql import nexmark_combined_ddl, nexmark_ddl
from piestream.connectors.sinks import SINK_CONNECTORS
from piestream.stream.connector import register_sink_connector, register_source_connector

SOURCE_CONNECTORS = {
    "nexmark": nexmark_connector,
    "datagen": datagen_connector,
    "file": file_connector,
    "fs": file_connector,
    "posix_fs": file_connector,
    "kafka": kafka_connector,
    "postgres-cdc": postgres_cdc_connector,
    "mysql-cdc": mysql_cdc_connector,
}
#: (FORMAT, ENCODE) pairs of the connectors that declare their own (RisingWave's
#: CONNECTORS_COMPATIBLE_FORMATS); the others take PLAIN / NATIVE / NONE
SOURCE_FORMATS = {"kafka": KAFKA_FORMATS}


def ensure_registered() -> None:
    """Register the built-in source and sink connectors (idempotent)."""
    for name, connector in SOURCE_CONNECTORS.items():
        register_source_connector(name, connector, SOURCE_FORMATS.get(name))
    for name, sink in SINK_CONNECTORS.items():
        register_sink_connector(name, sink)


ensure_registered()

__all__ = ["ensure_registered", "nexmark_combined_ddl", "nexmark_ddl"]
