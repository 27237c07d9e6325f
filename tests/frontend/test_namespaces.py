"""Name resolution through schemas, as PostgreSQL's namespace.c does it: a qualified name in its
schema, an unqualified one through search_path (the first schema holding it; schemas that do not
exist are skipped), CREATE into the first existing schema of the path, three-part names only in
the current database. Messages and SQLSTATEs are PostgreSQL 15's."""

from __future__ import annotations

import pytest

from piestream.common.errors import PiestreamError
from piestream.common.types import INT
from piestream.frontend.binder import QueryBinder
from piestream.frontend.catalog import (
    CatalogSnapshot,
    ColumnCatalog,
    Relation,
    RelationKind,
    format_search_path,
    parse_search_path,
)
from piestream.frontend.parser import parse_one
from piestream.frontend.parser.names import ObjectName


def _catalog(path: tuple[str, ...] = ("public",)) -> CatalogSnapshot:
    cat = CatalogSnapshot(schemas={"public", "a", "b"}, search_path=path, database="dev")
    for i, (schema, name) in enumerate([("public", "t"), ("a", "t"), ("a", "only_a"), ("b", "t")]):
        cat.add(Relation(2000 + i, name, RelationKind.TABLE, (ColumnCatalog("x", INT),), schema_name=schema))
    return cat


def _found(cat: CatalogSnapshot, name: str) -> str | None:
    rel = cat.get_relation(name)
    return None if rel is None else f"{rel.schema_name}.{rel.name}"


def test_unqualified_names_take_the_first_schema_of_the_path_that_holds_them() -> None:
    assert _found(_catalog(), "t") == "public.t"
    assert _found(_catalog(("a", "public")), "t") == "a.t"
    assert _found(_catalog(("b", "a")), "t") == "b.t"
    assert _found(_catalog(("nosuch", "b")), "t") == "b.t"  # a missing schema is skipped
    assert _found(_catalog(("public", "a")), "only_a") == "a.only_a"
    assert _found(_catalog(("public",)), "only_a") is None  # not on the path: 42P01 for a query


def test_qualified_names_ignore_the_path() -> None:
    cat = _catalog(("public",))
    assert _found(cat, ObjectName("t", "b")) == "b.t"
    assert _found(cat, ObjectName("t", "b", "dev")) == "b.t"
    assert _found(cat, ObjectName("only_a", "public")) is None
    with pytest.raises(PiestreamError) as info:
        cat.get_relation(ObjectName("t", "public", "other"))
    assert (info.value.sqlstate, info.value.message) == (
        "0A000",
        'cross-database references are not implemented: "other.public.t"',
    )


def test_create_goes_to_the_first_existing_schema_of_the_path() -> None:
    assert _catalog(("nosuch", "b", "a")).creation_schema("n") == "b"
    assert _catalog().creation_schema(ObjectName("n", "a")) == "a"
    for path, name, message in [
        (("nosuch",), "n", "no schema has been selected to create in"),
        (("public",), ObjectName("n", "nosuch"), 'schema "nosuch" does not exist'),
    ]:
        with pytest.raises(PiestreamError) as info:
            _catalog(path).creation_schema(name)
        assert (info.value.sqlstate, info.value.message) == ("3F000", message)


def test_search_path_settings_read_as_postgresql_reads_them() -> None:
    assert parse_search_path('"$user", public', "alice") == ("alice", "public")
    assert parse_search_path('"$user", public', "") == ("public",)
    assert parse_search_path('Public, "MixedCase", b') == ("public", "MixedCase", "b")
    assert parse_search_path(format_search_path(("a b", 'q"x', "c"))) == ("a b", 'q"x', "c")


def test_the_binder_resolves_from_items_and_column_qualifiers_by_schema() -> None:
    cat = _catalog(("a", "public"))

    def reads(sql: str) -> set[int]:
        binder = QueryBinder(cat)
        binder.bind_query(parse_one(sql).query)  # type: ignore[attr-defined]
        return binder.dependencies

    assert reads("SELECT x FROM t") == {2001}  # a.t
    assert reads("SELECT public.t.x FROM public.t") == {2000}
    assert reads('SELECT t.x FROM dev."b".t') == {2003}
    assert reads("SELECT p.x FROM public.t p JOIN b.t q ON p.x = q.x") == {2000, 2003}
    with pytest.raises(PiestreamError) as info:
        reads("SELECT * FROM nosuch.t")
    assert (info.value.sqlstate, info.value.message) == ("42P01", 'relation "nosuch.t" does not exist')
