"""The Delta Lake target of a lake sink (through the ``deltalake`` package); see `lakehouse`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pyarrow as pa

from piestream.connectors.lakehouse import EPOCH_KEY, OP_COLUMN, SINK_KEY, check_columns, to_lake

#: History entries read per look-up of the last epoch before reading the whole history.
_RECENT = 64


def create_delta_table(location: str, schema: pa.Schema) -> Callable[[], None] | None:
    """Create the table unless it exists (then it must have the sink's columns). Returns how to
    remove the table it created (None: it existed): only what this call made goes."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        existing = DeltaTable(location)
    except TableNotFoundError:
        local = "://" not in location or location.startswith("file://")
        path = location.removeprefix("file://")
        existed = os.path.exists(path)
        DeltaTable.create(location, schema=schema)
        if not local:
            return None

        def undo() -> None:
            shutil.rmtree(path if not existed else os.path.join(path, "_delta_log"), ignore_errors=True)

        return undo
    check_columns([f.name for f in existing.schema().fields], schema, f"Delta table {location}")
    return None


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class DeltaSinkTable:
    """Appends (append-only, changelog) or MERGEs (upsert) one epoch per Delta commit, the
    epoch in the commit's custom metadata."""

    def __init__(self, location: str, sink_name: str, sink_type: str, key: tuple[str, ...]) -> None:
        self.location = location
        self.sink_name = sink_name
        self.sink_type = sink_type
        self.key = key

    def last_epoch(self) -> int | None:
        from deltalake import DeltaTable

        table = DeltaTable(self.location)
        for limit in (_RECENT, None):
            history = table.history(limit) if limit else table.history()
            epochs = [
                int(h[EPOCH_KEY]) for h in history if h.get(SINK_KEY) == self.sink_name and EPOCH_KEY in h
            ]
            if epochs:
                return max(epochs)
            if limit and len(history) < limit:
                break
        return None

    def commit(self, epoch: int, data: pa.Table) -> None:
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        props = CommitProperties(custom_metadata={EPOCH_KEY: str(epoch), SINK_KEY: self.sink_name})
        data = to_lake(data, "delta")
        if self.sink_type != "upsert":
            write_deltalake(self.location, data, mode="append", commit_properties=props)
            return
        columns = [n for n in data.column_names if n != OP_COLUMN]
        on = " AND ".join(f"t.{_quote(k)} IS NOT DISTINCT FROM s.{_quote(k)}" for k in self.key)
        values = {_quote(c): f"s.{_quote(c)}" for c in columns}
        (
            DeltaTable(self.location)
            .merge(data, predicate=on, source_alias="s", target_alias="t", commit_properties=props)
            .when_matched_delete(predicate=f"s.{OP_COLUMN} = 'delete'")
            .when_matched_update(updates=values, predicate=f"s.{OP_COLUMN} = 'upsert'")
            .when_not_matched_insert(updates=values, predicate=f"s.{OP_COLUMN} = 'upsert'")
            .execute()
        )
