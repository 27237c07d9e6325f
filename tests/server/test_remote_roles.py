"""The Python API and the Spark data source logged in to a server as a role (issue 31): every
statement, bulk insert and read is checked by the server's privilege code, as psql's are —
42501 with PostgreSQL's text for a role without the privilege, rows once it is granted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import piestream
from piestream.common.errors import PiestreamError
from piestream.common.types import INT, VARCHAR
from piestream.connectors.spark.spark_types import spark_schema
from piestream.server.database import Database, DatabaseConfig
from piestream.server.pgwire import PgServer

ROOT_PW = "r00t-pw"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    config = DatabaseConfig(runner="local", barrier_interval=0.05, parallelism=1)
    auth = {"method": "scram-sha-256", "users": {"root": ROOT_PW}}
    db = Database(tmp_path_factory.mktemp("remote"), config=config)
    srv = PgServer(db, port=0, auth=auth, shutdown_timeout=5).start()
    with piestream.connect(f"postgresql://root@127.0.0.1:{srv.port}/dev", password=ROOT_PW) as root:
        root.sql("CREATE USER alice WITH PASSWORD 'alice-pw'")
        root.sql("CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR, d DECIMAL)")
        root.sql("INSERT INTO t VALUES (1, 'a', 1.5), (2, NULL, 2.25)")
        root.sql("CREATE MATERIALIZED VIEW mv AS SELECT count(*) AS n FROM t")
    yield srv
    srv.stop()


def url(srv: PgServer, user: str = "alice") -> str:
    return f"postgresql://{user}@127.0.0.1:{srv.port}/dev"


def denied(fn: object, *args: object) -> str:
    with pytest.raises(PiestreamError) as e:
        fn(*args)  # type: ignore[operator]
    assert e.value.sqlstate == "42501", e.value
    return e.value.message


def test_the_python_api_logs_in_as_a_role_and_is_checked(server: PgServer) -> None:
    with pytest.raises(PiestreamError) as e:
        piestream.connect(url(server), password="wrong")
    assert e.value.sqlstate == "28P01"

    with piestream.connect(url(server), password="alice-pw") as alice:
        assert repr(alice).startswith("<piestream.RemoteConnection alice@127.0.0.1")
        assert alice.sql("SELECT current_user").scalar() == "alice"
        assert denied(alice.sql, "SELECT * FROM t") == "permission denied for table t"
        assert denied(alice.sql, "SELECT n FROM mv") == "permission denied for materialized view mv"
        assert denied(alice.insert, "t", {"k": [3], "v": ["c"]}) == "permission denied for table t"
        assert denied(alice.sql, "DROP TABLE t") == "must be owner of table t"

        with piestream.connect(url(server, "root"), password=ROOT_PW) as root:
            root.sql("GRANT SELECT ON t, mv TO alice")
        r = alice.sql("SELECT k, v, d FROM t WHERE k >= $1 ORDER BY k", (1,))
        assert r.columns == ["k", "v", "d"]
        assert r.rows == [(1, "a", Decimal("1.5")), (2, None, Decimal("2.25"))]  # typed, as embedded
        assert r.to_arrow().column("k").to_pylist() == [1, 2]
        assert denied(alice.insert, "t", pa.table({"k": [3], "v": ["c"]})) == "permission denied for table t"

        with piestream.connect(url(server, "root"), password=ROOT_PW) as root:
            root.sql("GRANT INSERT ON t TO alice")
        assert alice.insert("t", {"k": [3, 4], "v": ["c", "d"]}) == 2  # a binary COPY, d defaults NULL
        with alice.transaction():
            alice.sql("INSERT INTO t VALUES ($1, $2, $3)", (5, "e", Decimal("5.5")))
            assert alice.in_transaction
        assert not alice.in_transaction
        with alice.transaction():  # nested blocks are savepoints, as with an embedded Connection
            alice.sql("INSERT INTO t (k, v) VALUES (6, 'f')")
            with pytest.raises(RuntimeError), alice.transaction():
                alice.sql("INSERT INTO t (k, v) VALUES (7, 'g')")
                raise RuntimeError("undo the inner block only")
            assert alice.in_transaction
        assert not alice.in_transaction
        alice.flush()
        assert alice.sql("SELECT n FROM mv").scalar() == 6
        assert alice.sql("SELECT k FROM t WHERE k >= 6 ORDER BY k").rows == [(6,)]
        assert alice.sql("SELECT v FROM t WHERE k = 4").rows == [("d",)]


def test_url_parts_and_embedded_arguments(tmp_path: Path) -> None:
    from piestream.server.remote import ServerAddress

    a = ServerAddress.parse("postgresql://bob:p%40ss@db.example:5433/prod?sslmode=require")
    assert (a.host, a.port, a.user, a.password, a.database, a.sslmode) == (
        "db.example", 5433, "bob", "p@ss", "prod", "require",
    )  # fmt: skip
    assert ServerAddress.parse("postgres://h", user="x", password="y").password == "y"
    with pytest.raises(TypeError, match="server URL"):
        piestream.connect(tmp_path / "db", user="alice")


@pytest.mark.spark
def test_the_spark_data_source_reads_and_writes_through_the_server_as_a_role(spark, server: PgServer) -> None:  # type: ignore[no-untyped-def]
    piestream.register_spark(spark)
    with piestream.connect(url(server, "root"), password=ROOT_PW) as root:
        root.sql("CREATE USER carol WITH PASSWORD 'carol-pw'")
        root.sql("CREATE TABLE s (k INT PRIMARY KEY, v VARCHAR, ts TIMESTAMP)")
        root.sql("INSERT INTO s VALUES (1, 'x', '2024-01-02 03:04:05'), (2, 'y', NULL)")

    options = {"url": url(server, "carol"), "password": "carol-pw", "table": "s"}

    def read() -> object:
        return spark.read.format("piestream").options(**options).load()

    # what Spark runs to plan a read and in a write task, called here directly (a Spark job
    # each would cost minutes on a loaded machine): the server refuses the role
    from piestream.server.spark_source import PiestreamDataSource, ServerWriter

    source = PiestreamDataSource(options)
    with pytest.raises(PiestreamError, match="permission denied for table s"):
        source.schema()
    writer = source.writer(spark_schema([("k", INT), ("v", VARCHAR)]), False)
    assert isinstance(writer, ServerWriter)
    batch = pa.RecordBatch.from_pydict({"k": pa.array([3], pa.int32()), "v": ["z"]})
    with pytest.raises(PiestreamError, match="permission denied for table s"):
        writer.write(iter([batch]))
    # the data-directory data source does not take a server's role: it refuses the option
    from piestream.connectors.spark.data_source import Options

    with pytest.raises(PiestreamError, match="register_spark"):
        Options.parse(options)

    with piestream.connect(url(server, "root"), password=ROOT_PW) as root:
        root.sql("GRANT SELECT, INSERT ON s TO carol")
    assert writer.write(iter([batch])).rows == 1  # the same task, now allowed
    rows = sorted((r.k, r.v, r.ts) for r in read().collect())  # type: ignore[attr-defined]

    assert rows == [
        (1, "x", dt.datetime(2024, 1, 2, 3, 4, 5)),
        (2, "y", None),
        (3, "z", None),
    ]  # one Spark job: the read, through the server as carol
