"""The postgres-cdc reader against a real PostgreSQL 15, without the rest of piestream: the
snapshot meets the stream with no gap and no duplicate, offsets resume exactly, transactions
larger than a budget span reads, key changes, TOAST, the ack, and the faults."""

from __future__ import annotations

import contextlib
import itertools
import time

import pytest
from cdc_follower import Follower
from pg_server import PgServer

from piestream.common.epoch import EpochPair
from piestream.common.types import DataType, TypeKind
from piestream.connectors.cdc import postgres
from piestream.connectors.cdc.offset import CdcOffset
from piestream.plan.source import SourceSpec
from piestream.stream.connector import SourceUnavailable

_n = itertools.count()
INT, TEXT = DataType(TypeKind.INT), DataType(TypeKind.VARCHAR)
EPOCH = EpochPair(2, 1)


def _reader(pg: PgServer, table: str, cols: tuple[tuple[str, DataType], ...]) -> postgres.PgCdcReader:
    k = next(_n)
    opts = {
        "connector": "postgres-cdc", "hostname": pg.host, "port": str(pg.port), "username": "cdc",
        "password": "cdc-secret", "database.name": pg.database, "table.name": table,
        "slot.name": f"r_slot_{k}", "publication.name": f"r_pub_{k}",
    }  # fmt: skip
    spec = SourceSpec(table, "postgres-cdc", cols, opts)
    postgres.check_upstream(spec, ["id"])
    reader, _ = postgres.postgres_cdc_connector(spec)
    assert isinstance(reader, postgres.PgCdcReader)
    return reader


def _upstream(pg: PgServer, table: str) -> dict[object, tuple[object, ...]]:
    return {r[0]: tuple(r) for r in pg.sql(f"SELECT * FROM {table} ORDER BY id")}


def test_snapshot_then_stream_no_gap_no_duplicate(pg: PgServer) -> None:
    pg.sql("CREATE TABLE r1 (id int PRIMARY KEY, v text)")
    pg.sql("INSERT INTO r1 SELECT g, 'v' || g FROM generate_series(1, 250) g")
    f = Follower(_reader(pg, "r1", (("id", INT), ("v", TEXT))))
    assert f.step(100) == 100  # the first chunk: the slot exists now, its snapshot is open
    pg.sql("INSERT INTO r1 VALUES (1000, 'late')")  # after the snapshot: comes by the stream
    pg.sql("UPDATE r1 SET v = 'changed' WHERE id IN (5, 200)")  # one copied, one not yet
    pg.sql("DELETE FROM r1 WHERE id IN (6, 201)")
    assert f.step(100) == 100
    off = CdcOffset.from_json(f.offset or "")
    assert off.phase == "snapshot" and off.cursor == ("200",) and off.snapshot_rows == 200
    f.drain(100)
    assert f.rows == _upstream(pg, "r1")
    pg.sql("BEGIN; INSERT INTO r1 SELECT g, 'big' FROM generate_series(2000, 2049) g; COMMIT")
    pg.sql("UPDATE r1 SET id = 3000 WHERE id = 7")  # a key change: the old key goes
    assert f.step(20) == 20  # a transaction larger than the budget spans reads
    assert 7 in f.rows and 2049 not in f.rows
    f.drain(20)
    assert f.rows == _upstream(pg, "r1") and 7 not in f.rows
    # not acknowledged yet: the next peek starts with applied transactions, which carry the
    # table's Relation message (sent once per decoding session)
    pg.sql("UPDATE r1 SET v = 'again' WHERE id = 8")
    f.step(ack=False)
    pg.sql("UPDATE r1 SET v = 'and again' WHERE id = 8")
    assert f.step(ack=False) == 1
    assert f.rows == _upstream(pg, "r1")
    # an upstream column added: the stream goes on (columns are taken by name)
    pg.sql("ALTER TABLE r1 ADD COLUMN extra int DEFAULT 5")
    pg.sql("INSERT INTO r1 VALUES (5000, 'after alter', 6)")
    pg.sql("UPDATE r1 SET v = 'altered' WHERE id = 8")
    f.drain()
    assert f.rows == {k: v[:2] for k, v in _upstream(pg, "r1").items()}


def test_restart_resumes_exactly_and_reads_are_repeatable(pg: PgServer) -> None:
    pg.sql("CREATE TABLE r2 (id int PRIMARY KEY, v text)")
    pg.sql("INSERT INTO r2 SELECT g, 'v' || g FROM generate_series(1, 50) g")
    reader = _reader(pg, "r2", (("id", INT), ("v", TEXT)))
    f = Follower(reader)
    f.step(20)
    # a restart mid-snapshot: the snapshot is gone, the copy goes on in a new one
    postgres.forget(reader.cfg)
    pg.sql("UPDATE r2 SET v = 'u1' WHERE id IN (3, 40)")
    pg.sql("DELETE FROM r2 WHERE id = 4")
    f.drain(20)
    assert f.rows == _upstream(pg, "r2")
    pg.sql("INSERT INTO r2 VALUES (100, 'a')")
    pg.sql("UPDATE r2 SET v = 'b' WHERE id = 100")
    before = f.offset
    first = reader.read(f.split, before, 1000, EPOCH)
    again = reader.read(f.split, before, 1000, EPOCH)  # a retried epoch: the same changes
    assert first.offset == again.offset and first.batches[0].equals(again.batches[0])
    f.step(ack=False)
    # the upstream restarts: nothing acknowledged is lost, nothing applied comes twice
    pg.restart()
    pg.sql("INSERT INTO r2 VALUES (101, 'c')")
    with pytest.raises(SourceUnavailable):
        f.step()  # the kept connection died with the server: this attempt fails, nothing read
    f.drain()
    assert f.rows == _upstream(pg, "r2")


def test_the_next_chunk_is_copied_ahead_and_other_reads_copy_their_own(
    pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.sql("CREATE TABLE r_ahead (id int PRIMARY KEY, v text)")
    pg.sql("INSERT INTO r_ahead SELECT g, 'v' || g FROM generate_series(1, 300) g")
    reader = _reader(pg, "r_ahead", (("id", INT), ("v", TEXT)))
    copies: list[tuple[tuple[str, ...] | None, int]] = []
    copy = postgres.PgCdcReader._copy

    def counted(
        self: postgres.PgCdcReader, snap: object, cursor: tuple[str, ...] | None, budget: int
    ) -> object:
        copies.append((cursor, budget))
        return copy(self, snap, cursor, budget)  # type: ignore[arg-type]

    monkeypatch.setattr(postgres.PgCdcReader, "_copy", counted)
    split = reader.splits()[0]
    first = reader.read(split, None, 100, EPOCH)
    pg.sql("UPDATE r_ahead SET v = 'late' WHERE id IN (150, 250)")  # after the snapshot: not copied
    second = reader.read(split, first.offset, 100, EPOCH)  # the chunk copied meanwhile
    assert copies == [(None, 100), (("100",), 100), (("200",), 100)]
    again = reader.read(split, first.offset, 100, EPOCH)  # a retried epoch copies its own
    assert copies[3] == (("100",), 100) and again.offset == second.offset
    assert again.batches[0].equals(second.batches[0])
    assert second.batches[0].column(1).to_pylist() == [f"v{i}" for i in range(101, 201)]
    smaller = reader.read(split, second.offset, 40, EPOCH)  # another budget: not the one ahead
    assert copies[-2:] == [(("200",), 40), (("240",), 40)]
    assert smaller.batches[0].column(0).to_pylist() == list(range(201, 241))
    f = Follower(reader)
    f.offset = smaller.offset
    f.drain(100)
    f.rows.update({i: (i, f"v{i}") for i in range(1, 241)})
    f.rows[150] = (150, "late")  # the stream's change of a key copied before it
    assert f.rows == _upstream(pg, "r_ahead")


def test_toast_full_identity_and_unresolvable_default(pg: PgServer) -> None:
    pg.sql("CREATE TABLE r3 (id int PRIMARY KEY, big text, v int)")
    pg.sql("ALTER TABLE r3 ALTER COLUMN big SET STORAGE EXTERNAL")
    big = "z" * 9000
    f = Follower(_reader(pg, "r3", (("id", INT), ("big", TEXT), ("v", INT))))
    f.drain()
    pg.sql(f"INSERT INTO r3 VALUES (1, '{big}', 1)")
    pg.sql("UPDATE r3 SET v = 2")  # the same read saw the value: it fills the unchanged column
    f.drain()
    assert f.rows == {1: (1, big, 2)}
    pg.sql("ALTER TABLE r3 REPLICA IDENTITY FULL")
    pg.sql("UPDATE r3 SET v = 3")  # FULL: from the old row
    f.drain()
    assert f.rows == {1: (1, big, 3)}
    pg.sql("ALTER TABLE r3 REPLICA IDENTITY DEFAULT")
    pg.sql("UPDATE r3 SET v = 4")
    with pytest.raises(postgres.CdcError, match="unchanged TOASTed column"):
        f.step()


def test_upstream_down_raises_source_unavailable_and_a_dropped_slot_fails(pg: PgServer) -> None:
    """An unreachable upstream fails the read with SourceUnavailable (08006, as Kafka's reader):
    never a short read that a retried attempt of the same epoch would not repeat."""
    pg.sql("CREATE TABLE r4 (id int PRIMARY KEY)")
    reader = _reader(pg, "r4", (("id", INT),))
    f = Follower(reader)
    f.drain()
    offset = f.offset
    pg.stop()
    try:
        with pytest.raises(SourceUnavailable) as e:
            f.step()
        assert e.value.sqlstate == "08006" and "postgres-cdc public.r4" in e.value.message
        health = postgres.HEALTH[reader.cfg.slot]
        assert health.failures == 1 and health.last_error and f.offset == offset
        with pytest.raises(SourceUnavailable):
            f.step()  # every attempt alike, no back-off of its own (the barrier manager's)
        assert health.failures == 2
    finally:
        pg.start()
    pg.sql("INSERT INTO r4 VALUES (1)")
    f.drain()
    assert f.rows == {1: (1,)} and health.failures == 0
    # another process holds the slot (a stray walsender): waited for, then unavailable
    other = reader.cfg.connect(replication=True)
    other.cursor().start_replication(
        slot_name=reader.cfg.slot,
        decode=False,
        options={"proto_version": "1", "publication_names": reader.cfg.publication},
    )
    try:
        with pytest.raises(SourceUnavailable, match="in use by another process"):
            f.step()
    finally:
        other.close()
    pg.sql("INSERT INTO r4 VALUES (3)")
    deadline = time.monotonic() + 30
    while 3 not in f.rows and time.monotonic() < deadline:  # the walsender ends a moment later
        with contextlib.suppress(SourceUnavailable):
            f.step()
        time.sleep(0.1)
    assert 3 in f.rows
    postgres.drop_slot(reader.cfg)
    pg.sql("INSERT INTO r4 VALUES (2)")
    with pytest.raises(postgres.CdcError, match="no longer exists upstream"):
        f.step()


def test_upstream_truncate_is_a_change_at_its_place_and_reads_repeat(pg: PgServer) -> None:
    pg.sql("CREATE TABLE r6 (id int PRIMARY KEY, v text)")
    pg.sql("INSERT INTO r6 SELECT g, 'v' || g FROM generate_series(1, 30) g")
    reader = _reader(pg, "r6", (("id", INT), ("v", TEXT)))
    f = Follower(reader)
    f.drain()
    pg.sql(
        "BEGIN; INSERT INTO r6 VALUES (100, 'a'); UPDATE r6 SET v = 'x' WHERE id = 1; TRUNCATE r6; "
        "INSERT INTO r6 VALUES (1, 'after'), (200, 'b'); COMMIT"
    )
    pg.sql("INSERT INTO r6 VALUES (300, 'c')")
    pg.sql("TRUNCATE r6")  # a transaction of its own, last in the read
    before = f.offset
    first = reader.read(f.split, before, 1000, EPOCH)
    again = reader.read(f.split, before, 1000, EPOCH)  # a retried epoch: the same
    assert first.truncate_at == again.truncate_at == [1, 2] and first.consumed == again.consumed == 7
    assert [b.to_pylist() for b in first.batches] == [b.to_pylist() for b in again.batches]
    assert [b.num_rows for b in first.batches] == [2, 3]
    # budgets that cut before, at and after each TRUNCATE: the same end state
    for budget in (1, 2, 3):
        g = Follower(reader)
        g.rows, g.offset = dict(f.rows), before
        while g.step(budget, ack=False):  # not acknowledged: the slot keeps the changes
            pass
        assert g.rows == {} == _upstream(pg, "r6")
    pg.sql("INSERT INTO r6 VALUES (7, 'new')")
    f.drain()
    assert f.rows == _upstream(pg, "r6") == {7: (7, "new")}


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_batched_decode_equals_the_per_message_one(pg: PgServer, identity: str) -> None:
    """The column-wise decode of a peek (`feed_batch`) gives what the per-message one (`feed`)
    gives, read after read from the same offsets, for every budget: inserts with NULLs, quotes,
    empty and non-ASCII text, updates, key changes, deletes, transactions of many changes."""
    import random

    from piestream.connectors.cdc import pgoutput as po

    table = f"r9_{identity.lower()}"
    pg.sql(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric, flag bool)")
    pg.sql(f"ALTER TABLE {table} REPLICA IDENTITY {identity}")
    pg.sql(f"INSERT INTO {table} SELECT g, 'v' || g, g * 1.5, g % 2 = 0 FROM generate_series(1, 40) g")
    cols = (("id", INT), ("v", TEXT), ("n", DataType(TypeKind.NUMERIC)), ("flag", DataType(TypeKind.BOOLEAN)))
    f = Follower(_reader(pg, table, cols))
    f.drain()
    start = f.offset
    rng = random.Random(5)
    texts = ["NULL", "''", "'it''s'", "'ünïcødé ✓'", "'a,b\"c'", "'x'"]
    for t in range(25):
        stmts = []
        for _ in range(rng.randrange(1, 12)):
            k, r = rng.randrange(80), rng.random()
            v, n = rng.choice(texts), rng.choice(["NULL", "0.25", "-3", "12345678901234567890.5"])
            if r < 0.4:
                stmts.append(
                    f"INSERT INTO {table} VALUES ({k}, {v}, {n}, {rng.random() < 0.5}) "
                    f"ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, n = EXCLUDED.n"
                )
            elif r < 0.7:
                stmts.append(f"UPDATE {table} SET v = {v}, flag = NOT flag WHERE id = {k}")
            elif r < 0.85:
                stmts.append(f"UPDATE {table} SET id = {1000 + 100 * t + k} WHERE id = {k}")
            else:
                stmts.append(f"DELETE FROM {table} WHERE id BETWEEN {k} AND {k + 3}")
        pg.sql("BEGIN; " + "; ".join(stmts) + "; COMMIT")
    reader = f.reader
    batch = reader._peek(10**6)  # aggregated upstream: the same messages as a row per message
    with reader._sql() as cur:
        cur.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s)",
            (reader.cfg.slot, reader.cfg.publication),
        )
        rows = [bytes(r[0]) for r in cur.fetchall()]
    assert len(rows) > 100
    assert [batch.message(i) for i in range(len(batch))] == [po.decode(r) for r in rows]
    for budget in (1, 4, 13, 10**6):
        offset, reads = start, 0
        while True:
            off = CdcOffset.from_json(offset or "")
            fast = postgres._Changes(reader, off, budget)
            assert fast.feed_batch(batch)
            slow = postgres._Changes(reader, off, budget)
            slow.feed(batch.message(i) for i in range(len(rows)))
            a, b = fast.result(), slow.result()
            assert (a.offset, a.consumed, a.truncate_at) == (b.offset, b.consumed, b.truncate_at)
            assert [o.tolist() for o in a.ops or []] == [o.tolist() for o in b.ops or []]
            assert [x.to_pylist() for x in a.batches] == [x.to_pylist() for x in b.batches]
            if not a.consumed:
                break
            offset, reads = a.offset, reads + 1
        assert reads >= (2 if budget < 10**6 else 1)
    f.drain(7)  # and the reader itself follows the table exactly
    assert f.rows == _upstream(pg, table)
