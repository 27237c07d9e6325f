"""`CREATE SINK s FROM x EMIT ON WINDOW CLOSE`: RisingWave parses the emit mode after either sink
form and plans `FROM x` as `SELECT * FROM x` (frontend/src/handler/create_sink.rs), so a sink
from a watermarked relation writes each row once, when the watermark passes it; a relation with
no watermark is refused with RisingWave's 0A000. The source, model and `h` are `paired.watermarked`'s.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from paired import T0, FileHarness, new_model, watermark_rows
from sqldiff import norm_rows

from piestream.common.errors import PiestreamError
from piestream.connectors.sinks import read_sink
from piestream.frontend.emit_on_window_close import CANNOT_EXECUTE


def test_sink_from_a_watermarked_source_emits_final_rows_once(h: FileHarness, tmp_path: Path) -> None:
    out = tmp_path / "sink"
    h.db.execute(
        f"CREATE SINK k FROM s EMIT ON WINDOW CLOSE "
        f"WITH (connector = 'parquet', path = '{out}', type = 'append-only')"
    )
    rng = random.Random(7)
    model = new_model()
    base = T0
    for _ in range(6):
        model.epoch(rows := watermark_rows(rng, base, rng.randint(20, 40)))
        h.feed(rows)
        h.db.execute("FLUSH")
        base += dt.timedelta(seconds=rng.randint(1, 4))
    assert model.watermark is not None
    want = norm_rows([(r[0], r[1], r[2]) for r in model.accepted if r[2] < model.watermark])
    sunk = norm_rows([(r["k"], r["v"], r["ts"]) for r in read_sink(str(out)).to_pylist()])
    assert sunk == want and sum(want.values()) > 20
    # rows at or above the watermark are held back (a plain sink would have written them)
    assert sum(want.values()) < len(model.accepted)


def test_sink_from_a_relation_without_watermark_is_refused(h: FileHarness) -> None:
    h.db.execute("CREATE MATERIALIZED VIEW n AS SELECT count(*) AS c FROM s")
    with pytest.raises(PiestreamError, match=CANNOT_EXECUTE) as e:
        h.db.execute("CREATE SINK k FROM n EMIT ON WINDOW CLOSE WITH (connector = 'blackhole')")
    assert e.value.sqlstate == "0A000" and h.db.catalog.get("k") is None
