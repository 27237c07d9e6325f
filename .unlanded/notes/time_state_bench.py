"""State of a temporal-filter MV while events grow: 30 epochs x 2,000 rows, one epoch = 1 minute,
window 5 minutes; prints rows inserted so far, rows in the MV and rows in the filter's state."""
import sys, tempfile, datetime as dt
sys.path.insert(0, "tests/sql")
import test_temporal_filter_sql as T
from pathlib import Path
db, clock = T._open(Path(tempfile.mkdtemp()) / "d")
with db:
    s = db.session()
    s.execute("CREATE TABLE ev (k BIGINT PRIMARY KEY, ts TIMESTAMPTZ)")
    s.execute("CREATE MATERIALIZED VIEW recent AS SELECT k FROM ev WHERE ts > now() - INTERVAL '5 minutes'")
    n = 0
    for e in range(30):
        now = clock.now
        rows = ", ".join(f"({n + i}, TIMESTAMPTZ '{(now - dt.timedelta(seconds=i % 60)).isoformat(sep=' ')}')" for i in range(2000))
        s.execute(f"INSERT INTO ev VALUES {rows}")
        n += 2000
        clock.advance(db, 60_000)
        mv = db.execute("SELECT count(*) FROM recent")[0].rows[0][0]
        print(f"epoch {e:2d} events {n:6d} mv_rows {mv:5d} filter_state_rows {T._internal_rows(db, 'recent')}", flush=True)
