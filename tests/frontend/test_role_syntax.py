"""CREATE / ALTER / DROP USER | ROLE and GRANT / REVOKE parse into their statements; the parts of
PostgreSQL's syntax piestream does not implement are 0A000, malformed ones 42601."""

from __future__ import annotations

import pytest

from piestream.common.errors import FeatureNotSupported, PiestreamError, SyntaxError_
from piestream.frontend.parser import (
    AlterOwner,
    AlterRole,
    CreateRole,
    DropRole,
    Grant,
    RoleOptions,
    parse_one,
)


def test_create_alter_drop_role() -> None:
    assert parse_one("CREATE USER bob WITH PASSWORD 'pw' SUPERUSER CREATEDB") == CreateRole(
        "bob", RoleOptions(superuser=True, createdb=True, password="pw")
    )
    assert parse_one('CREATE ROLE "Ops" NOLOGIN') == CreateRole(
        "Ops", RoleOptions(login=False), is_user=False
    )
    assert parse_one("CREATE USER u") == CreateRole("u", RoleOptions())
    assert parse_one("ALTER USER bob PASSWORD NULL NOSUPERUSER") == AlterRole(
        "bob", RoleOptions(superuser=False, password="")
    )
    assert parse_one("ALTER ROLE bob WITH LOGIN CREATEROLE") == AlterRole(
        "bob", RoleOptions(login=True, createrole=True)
    )
    assert parse_one("ALTER USER bob RENAME TO robert") == AlterRole("bob", RoleOptions(), rename_to="robert")
    assert parse_one("DROP USER IF EXISTS a, b") == DropRole(["a", "b"], if_exists=True)
    assert parse_one("DROP ROLE a") == DropRole(["a"])


def test_grant_and_revoke() -> None:
    grant = parse_one("GRANT SELECT, INSERT ON TABLE t, public.mv TO bob, PUBLIC")
    assert grant == Grant(("SELECT", "INSERT"), ["t", "mv"], ["bob", "public"], kind="table")
    assert isinstance(grant, Grant)
    assert [getattr(n, "schema", None) for n in grant.relations] == [None, "public"]
    assert parse_one("GRANT ALL PRIVILEGES ON MATERIALIZED VIEW mv TO bob") == Grant(
        ("INSERT", "SELECT", "UPDATE", "DELETE", "TRUNCATE"), ["mv"], ["bob"], kind="materialized view"
    )
    assert parse_one("REVOKE UPDATE, DELETE ON t FROM bob CASCADE") == Grant(
        ("UPDATE", "DELETE"), ["t"], ["bob"], revoke=True
    )
    assert parse_one("GRANT SELECT ON SOURCE s TO bob").kind == "source"  # type: ignore[attr-defined]
    assert parse_one("GRANT TRUNCATE ON t TO bob") == Grant(("TRUNCATE",), ["t"], ["bob"])


def test_schema_privileges_and_owners() -> None:
    assert parse_one("GRANT USAGE, CREATE ON SCHEMA s, t TO bob, PUBLIC") == Grant(
        ("USAGE", "CREATE"), ["s", "t"], ["bob", "public"], kind="schema"
    )
    assert parse_one("REVOKE ALL PRIVILEGES ON SCHEMA s FROM bob") == Grant(
        ("USAGE", "CREATE"), ["s"], ["bob"], revoke=True, kind="schema"
    )
    assert parse_one("GRANT SELECT ON ALL TABLES IN SCHEMA s TO bob") == Grant(
        ("SELECT",), ["s"], ["bob"], kind="all tables in schema"
    )
    assert parse_one("ALTER SCHEMA s OWNER TO bob") == AlterOwner("schema", "s", "bob")
    assert parse_one("ALTER TABLE s.t OWNER TO CURRENT_USER") == AlterOwner("table", "t", "current_user")
    assert parse_one("ALTER MATERIALIZED VIEW m OWNER TO bob") == AlterOwner("materialized view", "m", "bob")


@pytest.mark.parametrize(
    ("sql", "what"),
    [
        ("CREATE USER u VALID UNTIL '2030-01-01'", "role option VALID"),
        ("CREATE ROLE r CONNECTION LIMIT 3", "role option CONNECTION"),
        ("CREATE ROLE r IN ROLE a", "role option IN"),
        ("ALTER ROLE r SET search_path = x", "ALTER ROLE ... SET / RESET"),
        ("GRANT SELECT (a) ON t TO u", "column privileges"),
        ("GRANT REFERENCES ON t TO u", "privilege REFERENCES"),
        ("GRANT SELECT ON t TO u WITH GRANT OPTION", "WITH GRANT OPTION"),
        ("GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO u", "GRANT / REVOKE ON ALL SEQUENCES IN SCHEMA"),
        ("GRANT USAGE ON DATABASE dev TO u", "GRANT / REVOKE ON DATABASE"),
        ("ALTER SCHEMA s RENAME TO s2", "this form of ALTER SCHEMA"),
        ("GRANT SELECT ON t TO GROUP g", "GRANT TO GROUP"),
        ("GRANT admins TO bob", "GRANT / REVOKE of role membership"),
    ],
)
def test_unsupported_forms(sql: str, what: str) -> None:
    with pytest.raises(FeatureNotSupported) as e:
        parse_one(sql)
    assert e.value.message == f"{what} is not supported"


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE USER u PASSWORD ''",
        "CREATE USER u PASSWORD 'a' PASSWORD 'b'",
        "CREATE USER u SUPERUSER NOSUPERUSER",
        "CREATE USER u FLY",
        "GRANT SELECT ON t",
        "GRANT FLY ON t TO u",
        "REVOKE SELECT ON t TO u",
        "ALTER USER u",
    ],
)
def test_malformed(sql: str) -> None:
    with pytest.raises(PiestreamError) as e:
        parse_one(sql)
    assert isinstance(e.value, SyntaxError_), e.value
