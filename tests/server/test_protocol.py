"""Protocol details and robustness, by hand: limits, portals, garbage, disconnects, cancel."""

from __future__ import annotations

import socket
import struct
import threading
import time

import psycopg
import pytest
from pgwire_helpers import Raw, cstr, data_rows, error_fields, message

from piestream.server.pgwire import PgServer


@pytest.fixture(scope="module", autouse=True)
def _table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE p (k INT PRIMARY KEY, v VARCHAR)")
        c.execute("INSERT INTO p VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")


def _still_serving(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM p").fetchone() == (5,)


def test_ssl_request_is_declined_and_startup_continues(server: PgServer) -> None:
    raw = Raw(server.port, do_startup=False)
    raw.send(struct.pack("!ii", 8, 80877103))
    assert raw.sock.recv(1) == b"N"
    from pgwire_helpers import startup

    raw.send(startup())
    kinds = [k for k, _ in raw.until(b"Z")]
    assert kinds[0] == b"R" and b"K" in kinds and kinds.count(b"S") >= 8
    raw.close()


def test_extended_protocol_with_row_limits_and_describe(server: PgServer) -> None:
    raw = Raw(server.port)
    raw.send(
        message(b"P", cstr("s1") + cstr("SELECT k, v FROM p WHERE k >= $1 ORDER BY k") + struct.pack("!h", 0))
        + message(b"D", b"S" + cstr("s1"))
        + message(
            b"B", cstr("") + cstr("s1") + struct.pack("!hh", 0, 1) + struct.pack("!i", 1) + b"2" + b"\0\0"
        )
        + message(b"E", cstr("") + struct.pack("!i", 2))
        + message(b"H")
    )
    got = raw.until(b"s")  # PortalSuspended after two rows
    kinds = [k for k, _ in got]
    assert kinds == [b"1", b"t", b"T", b"2", b"D", b"D", b"s"]
    param_desc = got[1][1]
    assert struct.unpack("!hi", param_desc) == (1, 23)  # $1 inferred as integer from `k >= $1`
    assert data_rows(got) == [[b"2", b"b"], [b"3", b"c"]]
    raw.send(message(b"E", cstr("") + struct.pack("!i", 0)) + message(b"S"))
    got = raw.until(b"Z")
    assert data_rows(got) == [[b"4", b"d"], [b"5", b"e"]]
    assert (b"C", cstr("SELECT 2")) in got
    # Describe portal, binary results, Close
    raw.send(
        message(
            b"B",
            cstr("pt")
            + cstr("s1")
            + struct.pack("!h", 0)
            + struct.pack("!hi", 1, 1)
            + b"5"
            + struct.pack("!hh", 1, 1),
        )
        + message(b"D", b"P" + cstr("pt"))
        + message(b"E", cstr("pt") + struct.pack("!i", 0))
        + message(b"C", b"S" + cstr("s1"))
        + message(b"S")
    )
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"2", b"T", b"D", b"C", b"3", b"Z"]
    assert data_rows(got) == [[struct.pack("!i", 5), b"e"]]
    raw.close()


def test_error_in_extended_protocol_skips_to_sync(server: PgServer) -> None:
    raw = Raw(server.port)
    raw.send(
        message(b"P", cstr("") + cstr("SELECT * FROM nope") + struct.pack("!h", 0))
        + message(b"B", cstr("") + cstr("") + struct.pack("!hhh", 0, 0, 0))
        + message(b"E", cstr("") + struct.pack("!i", 0))
        + message(b"S")
    )
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"E", b"Z"]
    fields = error_fields(got[0][1])
    assert fields["C"] == "42P01" and fields["S"] == "ERROR" and fields["P"] == "15"
    raw.send(message(b"Q", cstr("SELECT 1")))
    assert data_rows(raw.until(b"Z")) == [[b"1"]]
    raw.send(message(b"X"))
    assert raw.closed()


def test_garbage_bytes_end_only_that_connection(server: PgServer, dsn: str) -> None:
    bad = Raw(server.port, do_startup=False)
    bad.send(b"\x00\x00\x00\x09GARBAGE!!" * 3)
    assert bad.closed()
    bad2 = Raw(server.port)  # garbage after a good startup: FATAL 08P01 and close
    bad2.send(b"\x01\x00\x00\x00\x04")  # message type 1 does not exist
    kind, body = bad2.read()
    assert kind == b"E" and error_fields(body)["C"] == "08P01" and error_fields(body)["S"] == "FATAL"
    assert bad2.closed()
    huge = Raw(server.port)  # a message claiming to be 1.5 GB
    huge.send(b"Q" + struct.pack("!i", 1_500_000_000))
    kind, body = huge.read()
    assert kind == b"E" and error_fields(body)["S"] == "FATAL"
    assert huge.closed()
    random = socket.create_connection(("127.0.0.1", server.port))
    random.sendall(bytes(range(256)) * 4)
    random.close()
    _still_serving(dsn)


def test_client_disconnecting_mid_query(server: PgServer, dsn: str) -> None:
    for _ in range(3):
        raw = Raw(server.port)
        raw.send(
            message(
                b"Q", cstr("SELECT * FROM p; INSERT INTO p VALUES (100, 'x'); DELETE FROM p WHERE k = 100")
            )
        )
        raw.sock.close()
    half = Raw(server.port)
    half.send(message(b"Q", cstr("SELECT 1"))[:7])  # half a message, then gone
    half.sock.close()
    time.sleep(0.5)
    _still_serving(dsn)


def test_cancel_request_cancels_a_waiting_insert(server: PgServer, dsn: str) -> None:
    barriers = server.database.barriers
    conn = psycopg.connect(dsn, autocommit=True)
    errors: list[BaseException] = []

    def insert() -> None:
        try:
            conn.execute("INSERT INTO p VALUES (50, 'cancelled?')")
        except BaseException as e:
            errors.append(e)

    with barriers.paused():  # no epoch can commit: the INSERT waits for its epoch
        t = threading.Thread(target=insert)
        t.start()
        time.sleep(0.5)
        conn.cancel_safe()
        t.join(timeout=10)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
    assert errors[0].sqlstate == "57014"
    assert "canceling statement due to user request" in str(errors[0])
    assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection goes on
    conn.execute("DELETE FROM p WHERE k = 50")  # the cancelled INSERT may have been applied
    conn.close()


def test_cancel_with_a_wrong_key_does_nothing(server: PgServer, dsn: str) -> None:
    raw = Raw(server.port)
    other = socket.create_connection(("127.0.0.1", server.port))
    other.sendall(struct.pack("!iiii", 16, 80877102, raw.pid, raw.secret ^ 1))
    assert other.recv(1) == b""  # the server just closes a cancel connection
    raw.send(message(b"Q", cstr("SELECT 2")))
    assert data_rows(raw.until(b"Z")) == [[b"2"]]
    raw.close()


def test_statement_timeout(server: PgServer, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 200")
        with server.database.barriers.paused(), pytest.raises(psycopg.errors.QueryCanceled) as e:
            conn.execute("INSERT INTO p VALUES (60, 'slow')")
        assert "statement timeout" in str(e.value)
        conn.execute("SET statement_timeout = 0")
        conn.execute("DELETE FROM p WHERE k = 60")
