"""Password authentication (SCRAM-SHA-256, md5) and graceful shutdown."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from pathlib import Path

import psycopg
import pytest
from pgwire_helpers import start_server

from piestream.server.pgwire.auth import ScramVerifier, md5_expected, read_password_file
from piestream.server.pgwire.client import SimpleClient

USERS = {"alice": "s3cret", "bob": "pa:ss wörd"}


@pytest.mark.parametrize("method", ["scram-sha-256", "md5"])
def test_password_authentication(tmp_path: Path, method: str) -> None:
    server = start_server(tmp_path, auth={"method": method, "users": USERS})
    try:
        base = f"host=127.0.0.1 port={server.port} dbname=dev"
        for user, password in USERS.items():
            with psycopg.connect(f"{base} user={user}", password=password, autocommit=True) as c:
                assert c.execute("SELECT current_user").fetchone() == (user,)
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "alice"'):
            psycopg.connect(f"{base} user=alice", password="wrong")
        with pytest.raises(
            psycopg.OperationalError, match='password authentication failed for user "mallory"'
        ):
            psycopg.connect(f"{base} user=mallory", password="s3cret")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(f"{base} user=alice", password="")
        # the CLI's own client speaks the same methods
        client = SimpleClient("127.0.0.1", server.port, "alice", "dev", "s3cret")
        assert client.query("SELECT 1")[0].rows == [("1",)]
        client.close()
    finally:
        server.stop()


def test_scram_verifier_and_password_file(tmp_path: Path) -> None:
    v = ScramVerifier.from_password("pencil", salt=b"0123456789abcdef")
    keys = base64.b64encode(v.stored_key).decode() + ":" + base64.b64encode(v.server_key).decode()
    text = "SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$" + keys
    assert ScramVerifier.parse(text) == v
    assert (
        md5_expected("user", "pw", b"abcd").startswith("md5") and len(md5_expected("u", "p", b"salt")) == 35
    )
    f = tmp_path / "passwords"
    f.write_text("# users\nalice:s3cret\n\nbob:pa:ss\n")
    assert read_password_file(str(f)) == {"alice": "s3cret", "bob": "pa:ss"}


def test_graceful_shutdown_finishes_running_statements(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    dsn = f"host=127.0.0.1 port={server.port} user=root dbname=dev"
    idle = psycopg.connect(dsn, autocommit=True)
    busy = psycopg.connect(dsn, autocommit=True)
    busy.execute("CREATE TABLE s (k INT PRIMARY KEY)")
    result: list[object] = []

    def insert() -> None:
        try:
            cur = busy.execute("INSERT INTO s VALUES (1)")
            result.append(cur.statusmessage == "INSERT 0 1")
        except BaseException as e:
            result.append(e)

    pause = contextlib.ExitStack()
    pause.enter_context(server.database.barriers.paused())  # the INSERT waits for its epoch
    t = threading.Thread(target=insert)
    t.start()
    time.sleep(0.3)
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    time.sleep(0.3)
    pause.close()  # the epoch commits: the INSERT is answered, then the connection ends
    stopper.join(timeout=30)
    t.join(timeout=10)
    assert not stopper.is_alive()
    assert result == [True]
    with pytest.raises(psycopg.OperationalError):
        idle.execute("SELECT 1")  # told 57P01 and closed
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)  # no longer listening
    # the committed row is there after a restart
    again = start_server(tmp_path)
    try:
        with psycopg.connect(f"host=127.0.0.1 port={again.port} user=root dbname=dev", autocommit=True) as c:
            assert c.execute("SELECT k FROM s").fetchall() == [(1,)]
    finally:
        again.stop()
