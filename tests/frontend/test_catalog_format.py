"""Catalog entries (`Relation`) are versioned JSON with typed fields; format 0 (an untyped `extra`
dict) is still read, a newer format is refused with a clear message."""

from __future__ import annotations

import json

import pytest

from piestream.common.order import ASC
from piestream.common.types import BIGINT, INT, VARCHAR
from piestream.frontend.catalog import (
    RELATION_FORMAT,
    CatalogFormatError,
    ColumnCatalog,
    IndexInfo,
    Relation,
    RelationKind,
    SinkInfo,
    SourceInfo,
)
from piestream.plan.materialize import ConflictBehavior
from piestream.plan.sink import sink_state_table
from piestream.plan.source import dead_letter_table
from piestream.storage.table.desc import ColumnDesc, TableDesc

DESC = TableDesc(5, (ColumnDesc("k", INT), ColumnDesc("_row_id", BIGINT, hidden=True)), (1,), (ASC,), (1,))


def relations() -> list[Relation]:
    cols = (ColumnCatalog("k", INT), ColumnCatalog("_row_id", BIGINT, hidden=True))
    table = Relation(
        5,
        "t",
        RelationKind.TABLE,
        cols,
        "CREATE TABLE t (k INT)",
        DESC,
        job_id=9,
        fragment_id=3,
        parallelism=2,
        conflict=ConflictBehavior.NO_CHECK,
        row_id_index=1,
    )
    index = Relation(6, "i", RelationKind.INDEX, cols[:1], table=DESC, index=IndexInfo(5, ("k",)))
    source = Relation(
        7,
        "src",
        RelationKind.SOURCE,
        (ColumnCatalog("v", VARCHAR),),
        properties={"connector": "file"},
        source=SourceInfo("csv", {"delimiter": ";"}, ("g",), dead_letter_table(8, "src_dead_letter")),
    )
    dead = Relation(8, "src_dead_letter", RelationKind.TABLE, (), owned_by=7)
    state = sink_state_table(12, "s_sink_state")
    sink = Relation(
        10, "s", RelationKind.SINK, cols[:1], job_id=11, sink=SinkInfo("parquet", "upsert", "/x", state)
    )
    return [table, index, source, dead, sink]  # fmt: skip


def test_round_trip_of_every_kind_specific_field() -> None:
    for rel in relations():
        d = json.loads(json.dumps(rel.to_json()))
        assert d["format"] == RELATION_FORMAT
        assert Relation.from_json(d) == rel


def test_format_0_extra_dict_becomes_typed_fields() -> None:
    old = {
        "id": 10, "name": "s", "kind": "sink", "columns": [{"name": "k", "type": "integer", "hidden": False}],
        "definition": "", "table": None, "depends_on": [5], "job_id": 11, "append_only": False,
        "properties": {"connector": "parquet"}, "schema": "public",
        "extra": {"fragment_id": 4, "parallelism": 2, "connector": "parquet", "sink_type": "upsert",
                  "path": "/tmp/out", "state_table": sink_state_table(12, "s_sink_state").to_json()},
    }  # fmt: skip
    rel = Relation.from_json(old)
    assert (rel.fragment_id, rel.parallelism) == (4, 2)
    assert rel.sink == SinkInfo("parquet", "upsert", "/tmp/out", sink_state_table(12, "s_sink_state"))
    table = dict(old, kind="table", extra={"conflict": "overwrite", "row_id": None, "fragment_id": 1})
    t = Relation.from_json(table)
    assert (t.conflict, t.row_id_index, t.sink) == (ConflictBehavior.OVERWRITE, None, None)
    index = dict(old, kind="index", extra={"index_of": 5, "index_columns": ["k"]})
    assert Relation.from_json(index).index == IndexInfo(5, ("k",))


def test_a_newer_format_is_refused_clearly() -> None:
    d = relations()[0].to_json() | {"format": RELATION_FORMAT + 1}
    with pytest.raises(
        CatalogFormatError, match=rf'catalog entry "t" has format {RELATION_FORMAT + 1}; this piestream reads'
    ):
        Relation.from_json(d)


def test_adaptive_round_trips_and_older_formats_read_as_fixed() -> None:
    from dataclasses import replace

    table = replace(relations()[0], adaptive=True)
    d = json.loads(json.dumps(table.to_json()))
    assert d["adaptive"] is True and Relation.from_json(d) == table
    assert "adaptive" not in relations()[0].to_json()  # FIXED: no key at all
    old = {k: v for k, v in d.items() if k != "adaptive"} | {"format": 6}  # written before ADAPTIVE
    rel = Relation.from_json(old)
    assert rel.adaptive is False and rel.parallelism == 2
