"""The Iceberg target of a lake sink (through ``pyiceberg`` with a SQL catalog, SQLite by
default); see `lakehouse`."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from piestream.connectors.lakehouse import EPOCH_KEY, OP_COLUMN, SINK_KEY, check_columns, to_lake


def _catalog(options: Mapping[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        options.get("catalog.name", "piestream"),
        uri=options["catalog.uri"],
        warehouse=options["warehouse.path"],
    )


def _identifier(options: Mapping[str, str]) -> str:
    return f"{options['database.name']}.{options['table.name']}"


def create_iceberg_table(options: Mapping[str, str], schema: pa.Schema) -> Callable[[], None] | None:
    """Create the table unless it exists (then it must have the sink's columns). Returns how to
    remove the table it created, files and catalog row, and its namespace if this call created
    that too (None: the table existed)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

    catalog = _catalog(options)
    namespace = options["database.name"]
    try:
        catalog.create_namespace(namespace)
        made_namespace = True
    except NamespaceAlreadyExistsError:
        made_namespace = False
    try:
        existing = catalog.load_table(_identifier(options))
    except NoSuchTableError:
        try:
            catalog.create_table(_identifier(options), schema=schema)
        except BaseException:
            if made_namespace:
                _drop_namespace(options)
            raise

        def remove() -> None:
            _catalog(options).purge_table(_identifier(options))
            if made_namespace:
                _drop_namespace(options)

        return remove
    check_columns([f.name for f in existing.schema().fields], schema, f"Iceberg table {_identifier(options)}")
    return None


def _drop_namespace(options: Mapping[str, str]) -> None:
    """Drop the namespace this sink created, unless another table lives in it by now."""
    from pyiceberg.exceptions import NamespaceNotEmptyError, NoSuchNamespaceError

    with contextlib.suppress(NamespaceNotEmptyError, NoSuchNamespaceError):
        _catalog(options).drop_namespace(options["database.name"])


def _key_filter(keys: pa.Table) -> Any:
    """Rows whose key is one of `keys` (NULL matching NULL, as the stream key does)."""
    from pyiceberg import expressions as ie

    # pyiceberg's predicates take their arguments positionally at run time; its stubs disagree
    In: Any = ie.In
    EqualTo: Any = ie.EqualTo
    IsNull: Any = ie.IsNull
    And: Any = ie.And
    Or: Any = ie.Or
    AlwaysFalse: Any = ie.AlwaysFalse

    if keys.num_columns == 1:
        name = keys.column_names[0]
        col = keys.column(0)
        values = pc.drop_null(col).to_pylist()
        expr: Any = In(name, values) if values else AlwaysFalse()
        return Or(expr, IsNull(name)) if col.null_count else expr
    out: Any = AlwaysFalse()
    # per key: a composite key has no IN form; an epoch's upsert keys are few per commit
    for row in keys.to_pylist():
        terms: list[Any] = [IsNull(k) if v is None else EqualTo(k, v) for k, v in row.items()]
        term = terms[0]
        for t in terms[1:]:
            term = And(term, t)
        out = Or(out, term)
    return out


class IcebergSinkTable:
    """Appends (append-only, changelog) or deletes-then-appends in one transaction (upsert) one
    epoch per Iceberg commit, the epoch in the snapshot summary."""

    def __init__(
        self, options: Mapping[str, str], sink_name: str, sink_type: str, key: tuple[str, ...]
    ) -> None:
        self.options = dict(options)
        self.sink_name = sink_name
        self.sink_type = sink_type
        self.key = key

    def _table(self) -> Any:
        return _catalog(self.options).load_table(_identifier(self.options))

    def last_epoch(self) -> int | None:
        epochs = [
            int(props[EPOCH_KEY])
            for snap in self._table().metadata.snapshots
            if (props := snap.summary.additional_properties if snap.summary else {}).get(SINK_KEY)
            == self.sink_name
            and EPOCH_KEY in props
        ]
        return max(epochs) if epochs else None

    def commit(self, epoch: int, data: pa.Table) -> None:
        props = {EPOCH_KEY: str(epoch), SINK_KEY: self.sink_name}
        table = self._table()
        data = to_lake(data, "iceberg")
        target = table.schema().as_arrow()
        if self.sink_type != "upsert":
            table.append(data.cast(target), snapshot_properties=props)
            return
        upserts = data.filter(pc.equal(data.column(OP_COLUMN), "upsert")).drop_columns([OP_COLUMN])
        with table.transaction() as tx, warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            tx.delete(_key_filter(data.select(list(self.key))), snapshot_properties=props)
            if upserts.num_rows:
                tx.append(upserts.cast(target), snapshot_properties=props)
