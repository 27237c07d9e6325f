"""piestream: a streaming database in Python — incremental materialized views on Spark.

``import piestream`` stays cheap: the API below is imported on first use.

    conn = piestream.connect("./piestream-data")   # Connection (piestream.server.api)
    conn.sql("SELECT 1").to_pandas()
    piestream.register_spark(spark)                # spark.read.format("piestream")
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# Arrow buffers sliced out of decoded bytes need not be 8-byte aligned; Acero (group-by, joins)
# then warns on stderr for every batch. Copy such buffers to aligned memory instead, silently.
# Read once by Arrow on first Acero use, so it is set before anything imports pyarrow.acero.
os.environ.setdefault("ACERO_ALIGNMENT_HANDLING", "reallocate")

if TYPE_CHECKING:
    from piestream.server.api import Connection, Result, connect, register_spark

__all__ = ["Connection", "Result", "connect", "register_spark"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from piestream.server import api

        return getattr(api, name)
    raise AttributeError(f"module 'piestream' has no attribute {name!r}")
