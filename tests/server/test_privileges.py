"""Users and privileges through psycopg against a real server with SCRAM passwords: roles made with
CREATE USER, ownership, GRANT / REVOKE, PostgreSQL's 42501 messages, pg_roles / \\du, passwords kept
as SCRAM verifiers only, failed logins logged without the password, roles surviving a restart."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgwire_helpers import start_server

from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer
from piestream.server.pgwire.auth import LoginThrottle

ROOT_PW = "r00t-pw"


def _server(data_dir: Path) -> PgServer:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=1)
    auth = {"method": "scram-sha-256", "users": {"root": ROOT_PW}}
    return PgServer(Database(data_dir, config=config), port=0, auth=auth, shutdown_timeout=5).start()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("privs")


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[PgServer]:
    srv = _server(data_dir)
    yield srv
    srv.stop()


def connect(srv: PgServer, user: str, password: str) -> psycopg.Connection[Any]:
    return psycopg.connect(
        f"host=127.0.0.1 port={srv.port} user={user} dbname=dev", password=password, autocommit=True
    )


def denied(pg: psycopg.Connection[Any], sql: str) -> str:
    """The 42501 message `sql` fails with."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
        pg.execute(sql)
    assert e.value.sqlstate == "42501"
    return str(e.value.diag.message_primary)


def test_users_ownership_and_grants(server: PgServer, data_dir: Path) -> None:
    with connect(server, "root", ROOT_PW) as root:
        root.execute("CREATE USER alice WITH PASSWORD 'alice-pw'")
        root.execute("CREATE USER bob PASSWORD 'bob-pw'")
        root.execute("CREATE ROLE auditors PASSWORD 'aud-pw'")  # a ROLE is NOLOGIN by default
        root.execute("GRANT CREATE ON SCHEMA public TO alice, bob")  # PostgreSQL 15: PUBLIC has not it
        with pytest.raises(psycopg.errors.DuplicateObject, match='role "bob" already exists'):
            root.execute("CREATE USER bob")
        rows = root.execute("SELECT rolname, rolsuper, rolcanlogin FROM pg_roles ORDER BY oid").fetchall()
        assert rows == [
            ("root", True, True),
            ("alice", False, True),
            ("bob", False, True),
            ("auditors", False, False),
        ]
        assert [r[0] for r in root.execute("SELECT usename FROM pg_user ORDER BY 1").fetchall()] == [
            "alice", "bob", "root",
        ]  # fmt: skip

    with connect(server, "alice", "alice-pw") as alice, connect(server, "bob", "bob-pw") as bob:
        alice.execute("CREATE TABLE t (k INT PRIMARY KEY, v INT)")
        alice.execute("INSERT INTO t VALUES (1, 10), (2, 20)")
        alice.execute("CREATE MATERIALIZED VIEW mv AS SELECT sum(v) AS s FROM t")
        alice.execute("CREATE VIEW v AS SELECT k FROM t")
        assert alice.execute("SELECT s FROM mv").fetchone() == (30,)

        # bob: nothing granted yet
        assert denied(bob, "SELECT * FROM t") == "permission denied for table t"
        assert denied(bob, "SELECT * FROM mv") == "permission denied for materialized view mv"
        assert denied(bob, "SELECT k FROM v") == "permission denied for view v"
        assert denied(bob, "WITH x AS (SELECT * FROM t) SELECT * FROM x") == "permission denied for table t"
        # a CTE named t hides the table only where it is in scope
        assert denied(bob, "SELECT * FROM (WITH t AS (SELECT 1 AS k) SELECT * FROM t) a, t") == (
            "permission denied for table t"
        )
        assert denied(bob, "WITH t AS (SELECT * FROM t) SELECT * FROM t") == "permission denied for table t"
        assert bob.execute("WITH t AS (SELECT 5 AS k) SELECT k FROM t").fetchone() == (5,)
        assert denied(bob, "INSERT INTO t VALUES (3, 30)") == "permission denied for table t"
        assert denied(bob, "DELETE FROM t") == "permission denied for table t"
        assert denied(bob, "DROP TABLE t CASCADE") == "must be owner of table t"
        assert denied(bob, "DROP MATERIALIZED VIEW mv") == "must be owner of materialized view mv"
        assert (
            denied(bob, "CREATE MATERIALIZED VIEW b1 AS SELECT k FROM t") == "permission denied for table t"
        )
        assert denied(bob, "GRANT SELECT ON t TO bob") == "permission denied for table t"
        assert denied(bob, "CREATE USER eve") == "permission denied to create role"
        for sql in ("COPY t TO STDOUT", "COPY (SELECT k FROM t) TO STDOUT", "COPY t FROM STDIN"):
            with (
                pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table t"),
                bob.cursor().copy(sql) as cp,
            ):
                if "FROM" in sql:
                    cp.write("9\t9\n")
                else:
                    list(cp)
        alice.execute("CREATE SUBSCRIPTION t_changes FROM t WITH (retention = '1h')")
        assert denied(bob, "DECLARE c SUBSCRIPTION CURSOR FOR t_changes") == "permission denied for table t"
        assert (
            denied(bob, "DECLARE q CURSOR WITH HOLD FOR SELECT k FROM t") == "permission denied for table t"
        )

        # grants: each privilege alone
        alice.execute("GRANT SELECT ON t TO bob")
        assert sorted(bob.execute("SELECT k, v FROM t").fetchall()) == [(1, 10), (2, 20)]
        assert denied(bob, "INSERT INTO t VALUES (3, 30)") == "permission denied for table t"
        alice.execute("GRANT INSERT ON TABLE t TO bob")
        bob.execute("INSERT INTO t VALUES (3, 30)")
        privs = bob.execute(
            "SELECT grantor, grantee, privilege_type, is_grantable FROM information_schema.table_privileges "
            "WHERE table_name = 't' ORDER BY 3"
        ).fetchall()
        assert privs == [("alice", "bob", "INSERT", "NO"), ("alice", "bob", "SELECT", "NO")]
        assert alice.execute("SELECT relacl FROM pg_class WHERE relname = 't'").fetchone() == (
            "{alice=arwdD/alice,bob=ar/alice}",
        )
        assert denied(bob, "UPDATE t SET v = 0 WHERE k = 1") == "permission denied for table t"
        assert alice.execute("SELECT s FROM mv").fetchone() == (60,)
        alice.execute("GRANT SELECT ON v TO bob")  # the view: reads t with alice's rights
        assert len(bob.execute("SELECT k FROM v").fetchall()) == 3

        # bob's own MV over t keeps his reads after the grant is gone (an MV reads as its owner)
        bob.execute("CREATE MATERIALIZED VIEW bob_mv AS SELECT count(*) AS n FROM t")
        alice.execute("REVOKE SELECT ON t FROM bob")
        assert denied(bob, "SELECT * FROM t") == "permission denied for table t"
        alice.execute("INSERT INTO t VALUES (4, 40)")
        assert bob.execute("SELECT n FROM bob_mv").fetchone() == (4,)
        assert denied(alice, "SELECT * FROM bob_mv") == "permission denied for materialized view bob_mv"

        bob.execute("CREATE TABLE IF NOT EXISTS t (k INT)")  # nothing created: t stays alice's
        assert denied(bob, "DROP TABLE t") == "must be owner of table t"

        # PUBLIC
        alice.execute("GRANT SELECT ON MATERIALIZED VIEW mv TO PUBLIC")
        assert bob.execute("SELECT s FROM mv").fetchone() == (100,)

        # \dt's owner column and what psql's \du lists
        owners = dict(
            alice.execute(
                "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
                "WHERE c.relname IN ('t', 'bob_mv')"
            ).fetchall()
        )
        assert owners == {"t": "alice", "bob_mv": "bob"}

        # a role that owns something cannot go; after its objects do, it can
        with connect(server, "root", ROOT_PW) as root:
            with pytest.raises(psycopg.errors.DependentObjectsStillExist) as e:
                root.execute("DROP USER bob")
            assert (
                e.value.diag.message_primary
                == 'role "bob" cannot be dropped because some objects depend on it'
            )
            assert "owner of materialized view bob_mv" in (e.value.diag.message_detail or "")
            assert "privileges for schema public" in (e.value.diag.message_detail or "")
            root.execute("REVOKE CREATE ON SCHEMA public FROM bob")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connect(server, "bob", "bob-pw").execute("DROP USER alice")
        bob.execute("DROP MATERIALIZED VIEW bob_mv")
        alice.execute("REVOKE ALL ON t FROM bob")
        alice.execute("REVOKE SELECT ON v FROM bob")
        # bob changes his own password; he may not change his attributes
        bob.execute("ALTER USER bob WITH PASSWORD 'bob-pw-2'")
        assert denied(bob, "ALTER USER bob SUPERUSER") == "permission denied to alter role"

    with connect(server, "bob", "bob-pw-2") as bob:
        assert bob.execute("SELECT current_user").fetchone() == ("bob",)
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "bob"'):
        connect(server, "bob", "bob-pw")
    with pytest.raises(psycopg.OperationalError, match='role "auditors" is not permitted to log in'):
        connect(server, "auditors", "aud-pw")

    with connect(server, "root", ROOT_PW) as root:
        root.execute("DROP USER bob")
        root.execute("DROP USER IF EXISTS bob")
        with pytest.raises(psycopg.errors.ObjectInUse, match="current user cannot be dropped"):
            root.execute("DROP USER root")
        root.execute("ALTER USER alice NOSUPERUSER CREATEDB")
        assert root.execute("SELECT rolcreatedb FROM pg_roles WHERE rolname = 'alice'").fetchone() == (True,)
        # a superuser may do anything with alice's objects
        assert root.execute("SELECT count(*) FROM t").fetchone() == (4,)

    # passwords are stored as SCRAM verifiers only: the meta store never holds one in clear
    raw = b"".join(p.read_bytes() for p in data_dir.glob("meta.db*"))
    assert b"SCRAM-SHA-256$4096:" in raw
    for pw in (b"alice-pw", b"bob-pw-2", ROOT_PW.encode()):
        assert pw not in raw


def test_psql_du_lists_roles(server: PgServer) -> None:
    with connect(server, "root", ROOT_PW) as root:
        root.execute("CREATE USER carol WITH PASSWORD 'c' CREATEDB")
    env = {**os.environ, "PGPASSWORD": ROOT_PW}
    out = subprocess.run(
        ["psql", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "root", "-d", "dev", "-c", "\\du"],
        check=False, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = {line.split("|")[0].strip(): line for line in out.stdout.splitlines() if "|" in line}
    assert "Superuser" in lines["root"]
    assert "Create DB" in lines["carol"] and "Superuser" not in lines["carol"]


def test_failed_logins_are_logged_without_the_password(
    server: PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="piestream.server.pgwire.connection")
    secret = "Not-The-Pa55word"
    before = server.metrics.auth_failures
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "root"'):
        connect(server, "root", secret)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert 'authentication failed for user "root" from 127.0.0.1' in text
    assert secret not in text
    assert server.metrics.auth_failures == before + 1


def test_roles_survive_a_restart(server: PgServer, data_dir: Path) -> None:
    with connect(server, "root", ROOT_PW) as root:
        root.execute("CREATE USER dave WITH PASSWORD 'dave-pw'")
        root.execute("CREATE TABLE dt (x INT)")
        root.execute("GRANT SELECT ON dt TO dave")
    server.stop()
    srv = _server(data_dir)
    try:
        with connect(srv, "dave", "dave-pw") as dave:
            assert dave.execute("SELECT count(*) FROM dt").fetchone() == (0,)
            assert denied(dave, "INSERT INTO dt VALUES (1)") == "permission denied for table dt"
    finally:
        srv.stop()


def test_trust_mode_knows_only_existing_roles(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "trust")
    try:
        with pytest.raises(psycopg.OperationalError, match='role "nobody" does not exist'):
            psycopg.connect(f"host=127.0.0.1 port={srv.port} user=nobody dbname=dev")
        with psycopg.connect(f"host=127.0.0.1 port={srv.port} user=root dbname=dev", autocommit=True) as pg:
            pg.execute("CREATE USER nobody")
        with psycopg.connect(f"host=127.0.0.1 port={srv.port} user=nobody dbname=dev") as pg:
            assert pg.execute("SELECT current_user").fetchone() == ("nobody",)
    finally:
        srv.stop()


def test_login_throttle_doubles_the_wait_after_the_free_failures() -> None:
    t = LoginThrottle(window=60.0, free=3, base=0.25, cap=2.0)
    waits = [t.failed("10.0.0.1", now=float(i))[1] for i in range(7)]
    assert waits == [0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0]
    assert t.failed("10.0.0.2", now=6.0) == (1, 0.0)  # per host
    assert t.failed("10.0.0.1", now=200.0) == (1, 0.0)  # the window moved on


def test_dashboard_login(server: PgServer) -> None:
    import base64
    import urllib.error
    import urllib.request

    from piestream.server.dashboard import Dashboard

    dash = Dashboard(server.database, port=0, require_login=True).start()

    def get(path: str, user: str | None = None, password: str = "") -> int:
        req = urllib.request.Request(dash.url + path)
        if user is not None:
            req.add_header(
                "Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            assert e.headers["WWW-Authenticate"].startswith('Basic realm="piestream"')
            return int(e.code)

    try:
        assert get("metrics") == 401
        assert get("metrics", "root", "wrong") == 401
        assert get("", "nobody", ROOT_PW) == 401
        assert get("metrics", "root", ROOT_PW) == 200
        assert get("health") == 200  # for load balancers
    finally:
        dash.stop()
