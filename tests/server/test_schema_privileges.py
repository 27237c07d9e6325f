"""Schema privileges through psycopg against a real server with SCRAM passwords: PostgreSQL 15's
public (USAGE for PUBLIC, no CREATE), USAGE and CREATE each granted alone and revoked, ON ALL
TABLES IN SCHEMA, the TRUNCATE privilege, ALTER SCHEMA / TABLE ... OWNER TO, DROP by the schema's
owner, pg_namespace's nspowner / nspacl and psql's \\dn+, all of it surviving a restart."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest
from pgwire_helpers import error_fields
from test_privileges import ROOT_PW, _server, connect, denied


def _psql(port: int, command: str) -> str:
    env = {**os.environ, "PGPASSWORD": ROOT_PW}
    out = subprocess.run(
        ["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "root", "-d", "dev", "-c", command],
        check=False, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _nsp(pg: psycopg.Connection[object], name: str) -> tuple[object, ...] | None:
    return pg.execute(
        "SELECT pg_get_userbyid(nspowner), nspacl FROM pg_namespace WHERE nspname = %s", (name,)
    ).fetchone()


def test_schema_privileges(tmp_path: Path) -> None:
    srv = _server(tmp_path)
    try:
        with connect(srv, "root", ROOT_PW) as root:
            root.execute("CREATE USER alice PASSWORD 'a-pw'")
            root.execute("CREATE USER bob PASSWORD 'b-pw'")
            # defaults: public is root's, PUBLIC has USAGE only (PostgreSQL 15)
            assert _nsp(root, "public") == ("root", "{root=UC/root,=U/root}")
            root.execute("CREATE SCHEMA team")
            assert _nsp(root, "team") == ("root", None)
            root.execute("CREATE TABLE team.t (k INT PRIMARY KEY)")
            root.execute("INSERT INTO team.t VALUES (1), (2)")
        with connect(srv, "alice", "a-pw") as alice, connect(srv, "bob", "b-pw") as bob:
            assert denied(alice, "CREATE TABLE a (k INT)") == "permission denied for schema public"
            assert denied(alice, "CREATE SCHEMA mine") == "permission denied for database dev"
            assert alice.execute("SELECT 1").fetchone() == (1,)  # USAGE on public: names resolve
            # no USAGE on team: qualified names are refused, even of nothing; search_path skips it
            assert denied(alice, "SELECT * FROM team.t") == "permission denied for schema team"
            assert denied(alice, "SELECT * FROM team.nothing") == "permission denied for schema team"
            assert denied(alice, "CREATE TABLE team.a (k INT)") == "permission denied for schema team"
            alice.execute("SET search_path = team, public")
            with pytest.raises(psycopg.errors.UndefinedTable):
                alice.execute("SELECT * FROM t")
            assert alice.execute("SELECT current_schema()").fetchone() == ("public",)

            with connect(srv, "root", ROOT_PW) as root:
                root.execute("GRANT USAGE ON SCHEMA team TO alice")  # USAGE alone
                root.execute("GRANT CREATE ON SCHEMA team TO bob")  # CREATE alone
                assert _nsp(root, "team") == ("root", "{root=UC/root,alice=U/root,bob=C/root}")
            assert denied(alice, "SELECT * FROM team.t") == "permission denied for table t"  # no SELECT
            assert denied(alice, "SELECT * FROM t") == "permission denied for table t"  # now on the path
            assert denied(alice, "CREATE TABLE team.a (k INT)") == "permission denied for schema team"
            bob.execute("CREATE TABLE team.b (k INT)")  # CREATE without USAGE: creates, cannot name it
            assert denied(bob, "SELECT * FROM team.b") == "permission denied for schema team"
            assert denied(bob, "GRANT SELECT ON team.b TO alice") == "permission denied for schema team"

            with connect(srv, "root", ROOT_PW) as root:
                root.execute("GRANT SELECT ON ALL TABLES IN SCHEMA team TO alice")
                root.execute("REVOKE CREATE ON SCHEMA team FROM bob")
            assert alice.execute("SELECT count(*) FROM team.t").fetchone() == (2,)
            assert alice.execute("SELECT count(*) FROM team.b").fetchone() == (0,)
            asked = alice.execute(
                "SELECT has_schema_privilege('team', 'USAGE'), has_schema_privilege('team', 'CREATE'), "
                "has_schema_privilege('bob', 'team', 'USAGE'), has_table_privilege('team.t', 'SELECT'), "
                "has_table_privilege('team.t', 'INSERT'), has_schema_privilege('public', 'CREATE')"
            ).fetchone()
            assert asked == (True, False, False, True, False, False)
            assert denied(bob, "CREATE TABLE team.c (k INT)") == "permission denied for schema team"

            # the schema's new owner: may create in it, drop what others own there, grant on it
            with connect(srv, "root", ROOT_PW) as root:
                root.execute("ALTER SCHEMA team OWNER TO alice")
            alice.execute("CREATE TABLE team.a (k INT)")
            alice.execute("DROP TABLE team.b")  # bob's, in alice's schema
            alice.execute("GRANT USAGE ON SCHEMA team TO bob")
            assert denied(bob, "SELECT * FROM team.a") == "permission denied for table a"
            assert denied(bob, "DROP SCHEMA team CASCADE") == "must be owner of schema team"
            assert denied(bob, "GRANT USAGE ON SCHEMA team TO bob") == "permission denied for schema team"
            assert denied(alice, "ALTER SCHEMA team OWNER TO bob") == 'must be member of role "bob"'
            assert denied(bob, "ALTER TABLE team.a OWNER TO bob") == "must be owner of table a"
            alice.execute("REVOKE USAGE ON SCHEMA team FROM bob")
            assert denied(bob, "SELECT * FROM team.a") == "permission denied for schema team"

            # TRUNCATE: a privilege of its own (granted alone, then revoked)
            alice.execute("INSERT INTO team.a VALUES (1)")
            alice.execute("GRANT USAGE ON SCHEMA team TO bob")
            assert denied(bob, "TRUNCATE team.a") == "permission denied for table a"
            alice.execute("GRANT TRUNCATE ON team.a TO bob")
            bob.execute("TRUNCATE team.a")
            assert denied(bob, "SELECT * FROM team.a") == "permission denied for table a"
            assert alice.execute("SELECT count(*) FROM team.a").fetchone() == (0,)
            alice.execute("REVOKE TRUNCATE ON team.a FROM bob")
            assert denied(bob, "TRUNCATE team.a") == "permission denied for table a"

            # wrong privilege for the object, objects without privileges
            with pytest.raises(
                psycopg.errors.InvalidGrantOperation, match="invalid privilege type SELECT for schema"
            ):
                alice.execute("GRANT SELECT ON SCHEMA team TO bob")
            with pytest.raises(
                psycopg.errors.InvalidGrantOperation, match="invalid privilege type USAGE for table"
            ):
                alice.execute("GRANT USAGE ON team.a TO bob")
            alice.execute("CREATE INDEX a_k ON team.a (k)")
            with pytest.raises(psycopg.errors.WrongObjectType, match='"a_k" is an index'):
                alice.execute("GRANT SELECT ON team.a_k TO bob")

        with connect(srv, "root", ROOT_PW) as root:
            root.execute("ALTER TABLE team.t OWNER TO bob")
            assert root.execute(
                "SELECT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = 'team' AND c.relname = 't'"
            ).fetchone() == ("bob",)
            with pytest.raises(psycopg.errors.DependentObjectsStillExist) as e:
                root.execute("DROP USER alice")
            assert "owner of schema team" in (e.value.diag.message_detail or "")
            acl = _nsp(root, "team")
        out = _psql(srv.port, "\\dn+")
        team = next(line for line in out.splitlines() if line.strip().startswith("team"))
        assert [c.strip(" +") for c in team.split("|")[:3]] == ["team", "alice", "alice=UC/alice"]
        assert "bob=U/alice" in out  # the next line of the cell
    finally:
        srv.stop()

    srv = _server(tmp_path)  # owners and grants of schemas are durable
    try:
        with connect(srv, "root", ROOT_PW) as root:
            assert _nsp(root, "team") == acl == ("alice", "{alice=UC/alice,bob=U/alice}")
            assert _nsp(root, "public") == ("root", "{root=UC/root,=U/root}")
        with connect(srv, "bob", "b-pw") as bob:
            assert bob.execute("SELECT count(*) FROM team.t").fetchone() == (2,)  # his table now
            assert denied(bob, "CREATE TABLE team.x (k INT)") == "permission denied for schema team"
        with connect(srv, "alice", "a-pw") as alice:
            alice.execute("DROP SCHEMA team CASCADE")  # the owner drops it, with bob's table in it
        with connect(srv, "root", ROOT_PW) as root:
            root.execute("CREATE SCHEMA team")  # a new schema of the name starts afresh
            assert _nsp(root, "team") == ("root", None)
    finally:
        srv.stop()


def test_an_older_data_directory_keeps_create_on_public(tmp_path: Path) -> None:
    """A data directory whose non-superusers predate schema privileges keeps PostgreSQL 14's
    public (PUBLIC may create there), as pg_upgrade keeps an old cluster's ACL."""
    from piestream.meta.roles import RoleCatalog
    from piestream.meta.store import MetaStore

    store = MetaStore(tmp_path / "meta.db")
    cat = RoleCatalog(store)
    from piestream.meta.roles import Role

    cat.create(Role(0, "old_user"))
    store.delete("schema_acl", "public")  # as written before this build
    assert RoleCatalog(store).schema_privileges("public", 99999) == {"USAGE", "CREATE"}
    fresh = RoleCatalog(MetaStore(tmp_path / "new.db"))
    assert fresh.schema_privileges("public", 99999) == {"USAGE"}


def _parse_describe(port: int, sql: str) -> tuple[str, str] | list[str]:
    """Parse + Describe (statement) + Sync as carol: the columns described, or (SQLSTATE, message)."""
    from piestream.server.pgwire.client import SimpleClient
    from piestream.server.pgwire.protocol import cstr, int16

    client = SimpleClient("127.0.0.1", port, "carol", "dev", "c-pw")
    try:
        ch = client.channel
        ch.send(b"P", cstr("") + cstr(sql) + int16(0))
        ch.send(b"D", b"S" + cstr(""))
        ch.send(b"S")
        ch.flush()
        out: tuple[str, str] | list[str] = []
        while True:
            kind, r = ch.read_message()
            if kind == b"E" and not out:
                fields = error_fields(r.rest())
                out = (fields["C"], fields["M"])
            elif kind == b"T":
                out = []
                for _ in range(r.int16()):
                    out.append(r.cstring())
                    r.bytes_(18)
            elif kind == b"Z":
                return out
    finally:
        client.close()


def test_columns_of_relations_a_role_may_not_name_or_use_stay_hidden(tmp_path: Path) -> None:
    """Describe (extended protocol), DESCRIBE / SHOW CREATE / SHOW COLUMNS and
    information_schema show no column of a relation in a schema without USAGE; information_schema
    lists only relations the role owns or holds a privilege on (PostgreSQL's rule)."""
    srv = _server(tmp_path)
    try:
        with connect(srv, "root", ROOT_PW) as root:
            root.execute("CREATE USER carol PASSWORD 'c-pw'")
            root.execute("CREATE SCHEMA vault")
            root.execute("CREATE TABLE vault.secret (k INT PRIMARY KEY, ssn VARCHAR)")
            root.execute("CREATE TABLE open_t (k INT, note VARCHAR)")
        with connect(srv, "carol", "c-pw") as carol:
            # Parse + Describe of the statement (the extended protocol, as PG's parse analysis)
            assert _parse_describe(srv.port, "SELECT * FROM vault.secret") == (
                "42501",
                "permission denied for schema vault",
            )
            for sql in (
                "DESCRIBE vault.secret",
                "SHOW CREATE TABLE vault.secret",
                "SHOW COLUMNS FROM vault.secret",
            ):
                assert denied(carol, sql) == "permission denied for schema vault"
            info = (
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema IN ('public', 'vault')"
            )
            tables = (
                "SELECT table_name FROM information_schema.tables WHERE table_schema IN ('public', 'vault')"
            )
            assert carol.execute(info).fetchall() == []  # no privilege on open_t either
            assert carol.execute(tables).fetchall() == []
            with connect(srv, "root", ROOT_PW) as root:
                root.execute("GRANT SELECT ON open_t TO carol")
                root.execute("GRANT DELETE ON vault.secret TO carol")  # no column privilege
                assert len(root.execute(info).fetchall()) == 4  # a superuser sees all
            assert sorted(carol.execute(info).fetchall()) == [("open_t", "k"), ("open_t", "note")]
            assert sorted(carol.execute(tables).fetchall()) == [("open_t",), ("secret",)]
            assert _parse_describe(srv.port, "SELECT * FROM open_t") == ["k", "note"]
    finally:
        srv.stop()
