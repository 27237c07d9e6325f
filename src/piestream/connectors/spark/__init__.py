"""Spark integration: the ``piestream`` data source for reading snapshots and writing tables."""

from piestream.connectors.spark.data_source import PiestreamDataSource, register

__all__ = ["PiestreamDataSource", "register"]
