"""Crash safety: a writer process is SIGKILLed at random points and the data dir must reopen to
exactly what it acknowledged.

The child writes, syncs and commits epochs in a loop (with a background compactor and vacuum),
printing each epoch after `commit_epoch` returns. Its writes are a pure function of the epoch
number, so the parent rebuilds the model of any committed epoch. After each kill the parent
reopens the SQLite meta file and the object store directory and checks that

- the committed epoch is at least the last one the child acknowledged (durability) and at most one
  more (it may have died between committing and printing);
- reads equal the model at that epoch, point gets and scans;
- full GC with no retention removes every orphan (SSTs synced or compacted but never committed)
  and reads still match.

Then the next child resumes from the committed epoch, so the runs also test recovery after
recovery.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from piestream.encoding.keys import user_key
from piestream.meta.hummock_manager import HummockManager
from piestream.meta.store import MetaStore
from piestream.storage.hummock.compaction import CompactionConfig
from piestream.storage.hummock.sstable_store import SstableStore
from piestream.storage.hummock.store import HummockStorage, visible_pairs
from piestream.storage.hummock.version import object_id_of_path
from piestream.storage.object_store import LocalObjectStore

BASE = 5000  # epoch n is (BASE + n) << 16
UNIVERSE = 600

CHILD = textwrap.dedent(
    """
    import random, sys
    from piestream.encoding.keys import full_key, user_key
    from piestream.meta.hummock_manager import CompactorThread, HummockManager
    from piestream.meta.store import MetaStore
    from piestream.storage.hummock.compaction import CompactionConfig
    from piestream.storage.hummock.kv_batch import TOMBSTONE, KvBatch, put_value
    from piestream.storage.hummock.sstable_store import SstableStore
    from piestream.storage.hummock.store import HummockStorage, StorageOptions
    from piestream.storage.object_store import LocalObjectStore

    sys.path.insert(0, sys.argv[2])
    from test_crash import BASE, CONFIG, writes_of

    data = sys.argv[1]
    store = LocalObjectStore(data + "/objects")
    mgr = HummockManager(MetaStore(data + "/meta.sqlite"), SstableStore(store), CONFIG)
    hs = HummockStorage(mgr.sstables, mgr.version, StorageOptions(block_size=1024, sstable_size=8192))
    mgr.on_new_version(hs.update_version)
    compactor = CompactorThread(mgr, interval=0.002)
    compactor.start()
    n = max(mgr.max_committed_epoch >> 16, BASE) - BASE + 1
    print("start", n, flush=True)
    while True:
        epoch = (BASE + n) << 16
        for spill, batch in enumerate(writes_of(n)):
            e = epoch | spill
            pairs = [(full_key(k, e), TOMBSTONE if v is None else put_value(v)) for k, v in batch.items()]
            hs.write_batch(KvBatch.from_pairs(pairs, [4] * len(pairs)), e)
        ssts = hs.sync(epoch)
        mgr.commit_epoch(epoch, ssts)
        print(epoch, flush=True)
        n += 1
    """
)

CONFIG = CompactionConfig(
    max_bytes_for_level_base=40_000,
    level_multiplier=4,
    level0_trigger_sub_levels=3,
    target_file_size=8192,
    block_size=1024,
)


def key(i: int) -> bytes:
    return user_key(1, i % 4, i.to_bytes(4, "big"))


def writes_of(n: int) -> list[dict[bytes, bytes | None]]:
    """Epoch n's writes: a first flush and a spill that rewrites some of the same keys."""
    rng = random.Random(n)
    first: dict[bytes, bytes | None] = {}
    for i in rng.sample(range(UNIVERSE), 40):
        first[key(i)] = None if rng.random() < 0.2 else b"%d:%d:" % (n, i) + rng.randbytes(rng.randint(0, 30))
    spill = {k: (b"spill %d" % n if rng.random() < 0.7 else None) for k in rng.sample(sorted(first), 10)}
    return [first, spill]


def model_at(n_committed: int) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for n in range(1, n_committed + 1):
        for batch in writes_of(n):
            for k, v in batch.items():
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
    return model


def run_child_and_kill(data: Path, delay: float) -> list[str]:
    """Start a writer, SIGKILL it `delay` seconds after its first commit; its stdout lines."""
    proc = subprocess.Popen(
        [sys.executable, str(data / "child.py"), str(data), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    first_commit = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line[:1].isdigit():
                first_commit.set()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    started = first_commit.wait(60)
    if started:
        time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    t.join(10)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert started, f"the child never committed: {err}"
    assert proc.returncode == -signal.SIGKILL, err
    return lines


def test_sigkill_at_random_points_loses_nothing_acknowledged(tmp_path: Path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    rng = random.Random(11)
    store = LocalObjectStore(tmp_path / "objects")
    last_acked = 0
    delays = [0.0, 0.01, 0.05, 0.2, 0.4, 0.8, rng.uniform(0, 0.3), rng.uniform(0, 0.6)]
    compacted = 0
    for delay in delays:
        lines = run_child_and_kill(tmp_path, delay)
        assert lines[0].startswith("start ")
        resumed_at = int(lines[0].split()[1])
        assert resumed_at == ((last_acked >> 16) - BASE + 1 if last_acked else 1)
        acked = [int(x) for x in lines[1:] if x.isdigit()]
        assert acked, lines
        last_acked = max(acked)

        meta = MetaStore(tmp_path / "meta.sqlite")
        mgr = HummockManager(meta, SstableStore(store), CONFIG)
        v = mgr.version
        committed = v.max_committed_epoch
        assert committed >= last_acked, "an acknowledged commit was lost"
        assert committed <= last_acked + (1 << 16), "more than one unacknowledged epoch committed"
        n = (committed >> 16) - BASE
        model = model_at(n)
        hs = HummockStorage(SstableStore(store), v)
        assert dict(visible_pairs(hs.iter(None, None))) == model
        probe = [key(i) for i in range(0, UNIVERSE, 7)]
        assert [hs.get(k, filter_len=4) for k in probe] == [model.get(k) for k in probe]
        compacted += sum(len(lv.ssts) for lv in v.levels)

        # orphans (uncommitted syncs, unreported compaction outputs) go; committed data stays
        gc = mgr.full_gc(retention_sec=0)
        vac = mgr.vacuum()
        print(
            f"delay {delay:.2f}: {len(acked)} epochs acked, committed n={n}, L0={len(v.l0)}, "
            f"levels={[len(lv.ssts) for lv in v.levels]}, full_gc={gc}, vacuum={vac}"
        )
        listed = {object_id_of_path(m.path) for m in store.list("hummock/sst/")}
        assert listed == v.object_ids()
        hs = HummockStorage(SstableStore(store), v)
        assert dict(visible_pairs(hs.iter(None, None))) == model
        last_acked = committed  # the next child resumes after what is committed
        meta.close()
    assert compacted > 0, "the background compactor never got to run"
