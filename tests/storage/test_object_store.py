"""Object store tests: one contract for every backend, then each backend's own promises.

Everything runs against real things: a temp directory, the in-memory registry, and a real
S3-compatible HTTP server (moto, standalone) behind a fault-injecting proxy.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from piestream.common.errors import ObjectNotFound, StorageError
from piestream.storage.object_store import (
    InMemoryObjectStore,
    LocalObjectStore,
    ObjectMeta,
    ObjectStore,
    RetriesExhausted,
    RetryPolicy,
    S3ObjectStore,
    call_with_retry,
    open_object_store,
)
from piestream.storage.object_store.local import TEMP_PREFIX
from piestream.storage.object_store.s3 import is_transient

if TYPE_CHECKING:
    from conftest import FaultProxy

FAST_RETRY = RetryPolicy(max_attempts=5, base_delay_s=0.01, max_delay_s=0.05)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _new_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> ObjectStore:
    if kind == "local":
        return LocalObjectStore(tmp_path / "objects")
    if kind == "memory":
        return InMemoryObjectStore(f"test-{uuid.uuid4().hex}")
    endpoint = request.getfixturevalue("s3_endpoint")
    return S3ObjectStore("piestream-test", f"run/{uuid.uuid4().hex}", endpoint=endpoint, retry=FAST_RETRY)


@pytest.fixture(params=["local", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return _new_store(request.param, tmp_path, request)


# --- the contract, on every backend ------------------------------------------------------------


def test_put_get_overwrite(store: ObjectStore) -> None:
    store.put("hummock/sst/000001-ab.sst", b"first")
    assert store.get("hummock/sst/000001-ab.sst") == b"first"
    assert store.exists("hummock/sst/000001-ab.sst")
    assert store.size("hummock/sst/000001-ab.sst") == 5
    store.put("hummock/sst/000001-ab.sst", b"second, longer")
    assert store.get("hummock/sst/000001-ab.sst") == b"second, longer"
    assert store.size("hummock/sst/000001-ab.sst") == 14
    assert [m.path for m in store.list()] == ["hummock/sst/000001-ab.sst"]


def test_missing_objects(store: ObjectStore) -> None:
    store.put("dir/present", b"x")
    for path in ["absent", "dir/absent", "dir", "dir/present/below"]:
        with pytest.raises(ObjectNotFound, match="not found"):
            store.get(path)
        with pytest.raises(ObjectNotFound):
            store.get_range(path, 0, 0)
        with pytest.raises(ObjectNotFound):
            store.size(path)
        assert not store.exists(path)
    # A prefix of other objects is not an object.
    assert not store.exists("dir")


def test_get_range(store: ObjectStore) -> None:
    data = bytes(range(100))
    store.put("r", data)
    assert store.get_range("r", 0, 100) == data
    assert store.get_range("r", 10, 5) == data[10:15]
    assert store.get_range("r", 99, 1) == data[99:]
    assert store.get_range("r", 100, 0) == b""
    assert store.get_range("r", 37, 0) == b""
    for offset, length in [(0, 101), (99, 2), (100, 1), (150, 10), (-1, 1), (0, -1)]:
        with pytest.raises(StorageError) as err:
            store.get_range("r", offset, length)
        assert not isinstance(err.value, ObjectNotFound)
        assert "'r'" in str(err.value)


def test_empty_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.exists("empty")
    assert store.get("empty") == b""
    assert store.size("empty") == 0
    assert store.get_range("empty", 0, 0) == b""
    with pytest.raises(StorageError):
        store.get_range("empty", 0, 1)
    assert [(m.path, m.size) for m in store.list()] == [("empty", 0)]


def test_binary_data_with_zero_bytes(store: ObjectStore) -> None:
    data = b"\x00" * 10 + bytes(range(256)) * 4 + b"\x00\r\n\x00"
    store.put("bin", data)
    assert store.get("bin") == data
    assert store.get_range("bin", 5, 20) == data[5:25]


def test_large_object(store: ObjectStore) -> None:
    # Just over 5 MiB: crosses S3's minimum multipart part size.
    data = os.urandom(5 * 1024 * 1024 + 4321)
    store.put("big/object.sst", data)
    assert store.size("big/object.sst") == len(data)
    assert store.get("big/object.sst") == data
    assert store.get_range("big/object.sst", 5 * 1024 * 1024 - 7, 100) == data[5 * 1024 * 1024 - 7 :][:100]


def test_list_prefixes_sorted(store: ObjectStore) -> None:
    paths = ["b/2", "a/1", "a/b/c", "a/bc", "ab", "a/10", "z", "a-1", "hummock/sst/000002.sst"]
    for i, path in enumerate(paths):
        store.put(path, b"x" * i)
    before = time.time()
    listed = store.list()
    assert [m.path for m in listed] == sorted(paths)
    assert all(isinstance(m, ObjectMeta) for m in listed)
    assert {m.path: m.size for m in listed} == {p: i for i, p in enumerate(paths)}
    assert all(before - 600 < m.last_modified <= before + 60 for m in listed)
    assert [m.path for m in store.list("a/")] == ["a/1", "a/10", "a/b/c", "a/bc"]
    assert [m.path for m in store.list("a/1")] == ["a/1", "a/10"]
    assert [m.path for m in store.list("a")] == ["a-1", "a/1", "a/10", "a/b/c", "a/bc", "ab"]
    assert [m.path for m in store.list("a/b")] == ["a/b/c", "a/bc"]
    assert [m.path for m in store.list("a/b/")] == ["a/b/c"]
    assert [m.path for m in store.list("hummock/sst/")] == ["hummock/sst/000002.sst"]
    assert store.list("nothing/") == []
    assert store.list("q") == []


def test_delete_and_delete_many(store: ObjectStore) -> None:
    for path in ["d/1", "d/2", "d/3", "e/1"]:
        store.put(path, path.encode())
    store.delete("d/1")
    store.delete("d/1")  # idempotent
    store.delete("never/was")
    assert not store.exists("d/1")
    assert [m.path for m in store.list()] == ["d/2", "d/3", "e/1"]
    store.delete_many(["d/2", "missing", "e/1"])
    assert [m.path for m in store.list()] == ["d/3"]
    store.delete_many(iter(["d/3"]))
    store.delete_many([])
    assert store.list() == []
    assert store.list("d") == []  # no directory leftovers are listed as objects


def test_pickle_and_url_reopen(store: ObjectStore) -> None:
    store.put("shared/a", b"from original")
    copy = pickle.loads(pickle.dumps(store))
    reopened = open_object_store(store.url)
    assert type(copy) is type(store) and type(reopened) is type(store)
    assert copy.get("shared/a") == b"from original"
    assert reopened.get("shared/a") == b"from original"
    copy.put("shared/b", b"from copy")
    reopened.put("shared/c", b"from reopened")
    assert [m.path for m in store.list("shared/")] == ["shared/a", "shared/b", "shared/c"]
    assert store.get("shared/c") == b"from reopened"
    assert reopened.url == store.url


def test_invalid_paths(store: ObjectStore) -> None:
    for path in ["", "/abs", "a//b", "a/", "a/../b", "./a", "..", "a\\b"]:
        with pytest.raises(StorageError, match="invalid object path"):
            store.put(path, b"x")
        with pytest.raises(StorageError, match="invalid object path"):
            store.get(path)
    assert store.list() == []


def test_concurrent_puts_publish_whole_objects(store: ObjectStore) -> None:
    """Writers race on one path while a reader checks it only ever sees a whole object."""
    size = 64 * 1024
    store.put("race", b"\x00" * size)
    errors: list[str] = []
    stop = threading.Event()

    def write(tag: int) -> None:
        for _ in range(5):
            store.put("race", bytes([tag]) * size)
            store.put(f"own/{tag}", bytes([tag]))

    def read() -> None:
        while not stop.is_set():
            data = store.get("race")
            if len(data) != size or len(set(data)) != 1:
                errors.append(f"torn read: {len(data)} bytes, {len(set(data))} distinct")

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(t,)) for t in range(1, 5)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert errors == []
    assert [m.path for m in store.list("own/")] == [f"own/{t}" for t in range(1, 5)]


# --- across processes: what a Spark worker does ------------------------------------------------

CHILD = """
import pickle, sys
from piestream.storage.object_store import open_object_store
url, pickled = sys.stdin.buffer.read().split(b"\\n", 1)
by_pickle, by_url = pickle.loads(pickled), open_object_store(url.decode())
assert by_pickle.get("p/from-parent") == b"parent" == by_url.get("p/from-parent")
by_pickle.put("p/from-child", b"child")
"""


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_store_reopens_in_another_process(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = _new_store(kind, tmp_path, request)
    store.put("p/from-parent", b"parent")
    store.list()  # the parent has connected; the child must connect on its own
    env = {**os.environ, "PYTHONPATH": SRC}
    stdin = store.url.encode() + b"\n" + pickle.dumps(store)
    cmd = [sys.executable, "-c", CHILD]
    proc = subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert store.get("p/from-child") == b"child"


def test_memory_store_is_shared_by_name_only() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    a, b = InMemoryObjectStore(name), open_object_store(f"memory://{name}")
    a.put("k", b"v")
    assert b.get("k") == b"v"
    assert not InMemoryObjectStore().exists("k")


def test_open_object_store_urls(tmp_path: Path, s3_endpoint: str) -> None:
    local = open_object_store(str(tmp_path / "plain dir"))
    assert isinstance(local, LocalObjectStore)
    assert local.root == tmp_path / "plain dir"
    assert open_object_store(local.url).root == local.root  # type: ignore[attr-defined]
    assert local.url.startswith("file:///") and "%20" in local.url

    s3 = open_object_store(f"s3://bkt/some/prefix/?endpoint={s3_endpoint}&region=eu-west-1")
    assert isinstance(s3, S3ObjectStore)
    c = s3.config
    assert (c.bucket, c.prefix, c.endpoint, c.region, c.access_key) == (
        "bkt",
        "some/prefix",
        s3_endpoint,
        "eu-west-1",
        None,
    )
    keyed = S3ObjectStore("bkt", endpoint=s3_endpoint, access_key="AK", secret_key="SEKRET")
    again = open_object_store(keyed.url)
    assert isinstance(again, S3ObjectStore) and again.config == keyed.config
    assert "SEKRET" not in repr(keyed)
    bad_urls = ["ftp://x/y", "s3://", "s3://b/p?bogus=1", "memory://", "s3://b/p?access_key=only"]
    for bad in [*bad_urls, "s3://b/p?max_attempts=0", "s3://b/p?endpoint=ftp://h:1"]:
        with pytest.raises(StorageError):
            open_object_store(bad)


def test_deferred_put_is_readable_at_once_and_made_durable_later(store: ObjectStore) -> None:
    paths = [f"hummock/sst/{i:016x}.sst" for i in range(3)]
    for i, p in enumerate(paths):
        store.put_deferred(p, bytes([i]) * (1000 + i))
        assert store.get(p) == bytes([i]) * (1000 + i)
    store.make_durable([*paths, paths[0]])  # repeats are fine
    store.make_durable([])
    assert [m.path for m in store.list("hummock/")] == paths


# --- local: atomic publish --------------------------------------------------------------------


def test_local_make_durable_fsyncs_every_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred put does no fsync; `make_durable` fsyncs each object and each directory holding
    one (its new entry), and refuses a missing object."""
    store = LocalObjectStore(tmp_path)
    store.put("a/seed", b"creates the directories durably")  # (a new directory's entry is
    store.put("b/seed", b"")  # fsynced when it is made, deferred put or not)
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    store.put_deferred("a/x.sst", b"x" * 100)
    store.put_deferred("a/y.sst", b"y" * 100)
    store.put_deferred("b/z.sst", b"z" * 100)
    assert synced == []
    store.make_durable(["a/x.sst", "a/y.sst", "b/z.sst"])
    root = str(tmp_path.resolve())
    assert sorted(synced) == sorted(
        [f"{root}/a/x.sst", f"{root}/a/y.sst", f"{root}/b/z.sst", f"{root}/a", f"{root}/b"]
    )
    assert _temp_files(tmp_path) == []
    with pytest.raises(ObjectNotFound, match=r"a/gone\.sst"):
        store.make_durable(["a/x.sst", "a/gone.sst"])


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_local_interrupted_put_publishes_nothing(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("sst/old", b"old contents")

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device (injected)")

    with monkeypatch.context() as mp:
        mp.setattr(os, failing, boom)
        with pytest.raises(StorageError, match="sst/new"):
            store.put("sst/new", b"new contents" * 1000)
        with pytest.raises(StorageError, match="sst/old"):
            store.put("sst/old", b"replacement")
    assert not store.exists("sst/new")
    with pytest.raises(ObjectNotFound):
        store.get("sst/new")
    assert store.get("sst/old") == b"old contents"
    assert [m.path for m in store.list()] == ["sst/old"]
    assert _temp_files(tmp_path) == []


KILLED_WRITER = """
import sys
from piestream.storage.object_store import LocalObjectStore
store, size = LocalObjectStore(sys.argv[1]), int(sys.argv[2])
for i in range(1, 1_000_000):
    store.put("big.sst", bytes([i % 251]) * size)
"""


def test_local_sigkilled_writer_leaves_old_or_whole_object(tmp_path: Path) -> None:
    """Kill a writer mid-put (while its temp file exists): readers see a whole object or none."""
    size = 16 * 1024 * 1024
    for round_ in range(3):
        root = tmp_path / f"round{round_}"
        env = {**os.environ, "PYTHONPATH": SRC}
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(size)], env=env)
        try:
            # Round 0 kills during the very first put (no object yet); later rounds kill later.
            deadline = time.monotonic() + 30
            while not (root.is_dir() and _temp_files(root)) or (round_ and not (root / "big.sst").exists()):
                assert time.monotonic() < deadline and proc.poll() is None, "writer never started writing"
                time.sleep(0.001)
            if round_:
                time.sleep(0.05 * round_)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        store = LocalObjectStore(root)
        listed = store.list()
        assert [m.path for m in listed] in ([], ["big.sst"])
        if round_:
            assert listed, "a completed put must survive the writer's death"
        if listed:
            data = store.get("big.sst")
            assert len(data) == size and len(set(data)) == 1
        # The dead writer's temp file is not an object, and the sweeper removes it.
        leftovers = len(_temp_files(root))
        assert store.sweep_temp_files(older_than_s=3600) == 0  # too young to be abandoned
        assert store.sweep_temp_files(older_than_s=0) == leftovers
        assert _temp_files(root) == []


def test_local_rejects_temp_names(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(StorageError, match="reserved"):
        store.put(f"a/{TEMP_PREFIX}x", b"")


def test_local_object_and_directory_cannot_share_a_name(tmp_path: Path) -> None:
    """The one place a directory differs from S3: 'a' and 'a/b' cannot both be objects."""
    store = LocalObjectStore(tmp_path)
    store.put("a/b", b"1")
    with pytest.raises(StorageError, match="'a'"):
        store.put("a", b"2")
    with pytest.raises(StorageError, match="'a/b/c'"):
        store.put("a/b/c", b"3")
    assert [m.path for m in store.list()] == ["a/b"]
    assert _temp_files(tmp_path) == []


# --- S3: bucket creation, markers, retries ------------------------------------------------------


def test_s3_creates_bucket_on_first_use(s3_endpoint: str) -> None:
    store = S3ObjectStore(f"fresh-{uuid.uuid4().hex[:12]}", endpoint=s3_endpoint, retry=FAST_RETRY)
    assert store.list() == []
    store.put("x/y", b"z")
    assert [(m.path, m.size) for m in store.list()] == [("x/y", 1)]


def test_s3_stores_with_different_prefixes_are_disjoint(s3_endpoint: str) -> None:
    a = S3ObjectStore("piestream-test", "tenant-a", endpoint=s3_endpoint)
    b = S3ObjectStore("piestream-test", "tenant-ab", endpoint=s3_endpoint)
    a.put("k", b"a")
    b.put("k", b"b")
    assert (a.get("k"), b.get("k")) == (b"a", b"b")
    assert [m.path for m in a.list()] == ["k"]


def _proxied(proxy: FaultProxy, attempts: int = 5) -> S3ObjectStore:
    retry = RetryPolicy(max_attempts=attempts, base_delay_s=0.01, max_delay_s=0.05)
    return S3ObjectStore("piestream-test", f"retry/{uuid.uuid4().hex}", endpoint=proxy.endpoint, retry=retry)


@pytest.mark.parametrize("fault", [503, 500, 429, "drop"])
def test_s3_transient_failures_are_retried(fault: int | str, fault_proxy: FaultProxy) -> None:
    store = _proxied(fault_proxy)
    store.list()  # connect and ensure the bucket before arming the fault
    fault_proxy.arm(fault, count=3, match="/obj")
    store.put("obj", b"payload")
    assert fault_proxy.failed == 3
    assert fault_proxy.matched > 3  # the successful attempt got through

    fault_proxy.arm(fault, count=2, match="/obj")
    assert store.get("obj") == b"payload"
    assert fault_proxy.failed == 2
    fault_proxy.arm(fault, count=2, match="/obj")
    assert store.get_range("obj", 3, 3) == b"loa"
    fault_proxy.arm(fault, count=2, match="/obj")
    store.delete("obj")
    assert not store.exists("obj")


def test_s3_gives_up_after_the_attempt_budget(fault_proxy: FaultProxy) -> None:
    store = _proxied(fault_proxy, attempts=3)
    store.list()
    fault_proxy.arm(503, count=100, match="/obj")
    with pytest.raises(StorageError, match=r"obj.*gave up after 3 attempts") as err:
        store.put("obj", b"payload")
    assert not isinstance(err.value, ObjectNotFound)
    assert fault_proxy.matched == 3
    fault_proxy.arm(503, count=0, match="/obj")
    assert not store.exists("obj")


def test_s3_unreachable_bucket_is_retried_then_reported(fault_proxy: FaultProxy) -> None:
    store = _proxied(fault_proxy, attempts=2)
    fault_proxy.arm("drop", count=100, match="/piestream-test")
    with pytest.raises(StorageError, match="unreachable"):
        store.get("anything")
    assert fault_proxy.matched == 2


@pytest.mark.parametrize("status", [403, 400])
def test_s3_permanent_errors_are_not_retried(status: int, fault_proxy: FaultProxy) -> None:
    store = _proxied(fault_proxy)
    store.put("obj", b"payload")
    for op in [lambda: store.get("obj"), lambda: store.put("obj", b"new"), lambda: store.size("obj")]:
        fault_proxy.arm(status, count=100, match="/obj")
        with pytest.raises(StorageError, match="obj") as err:
            op()
        assert not isinstance(err.value, ObjectNotFound)
        assert fault_proxy.matched == 1


def test_s3_not_found_is_not_retried(fault_proxy: FaultProxy) -> None:
    store = _proxied(fault_proxy)
    store.put("obj", b"payload")
    fault_proxy.arm(404, count=100, match="/obj")
    with pytest.raises(ObjectNotFound, match="obj"):
        store.get("obj")
    assert fault_proxy.matched == 1


# --- the retry helper itself ------------------------------------------------------------------


def test_retry_policy_backs_off_with_jitter_and_cap() -> None:
    policy = RetryPolicy(max_attempts=8, base_delay_s=0.05, max_delay_s=0.3)
    for attempt, nominal in [(1, 0.05), (2, 0.1), (3, 0.2), (4, 0.3), (7, 0.3)]:
        delays = {policy.delay(attempt) for _ in range(50)}
        assert all(nominal / 2 <= d <= nominal for d in delays)
        assert len(delays) > 1  # jittered


def test_call_with_retry_counts_attempts() -> None:
    slept: list[float] = []
    calls = 0

    def flaky(fail_times: int, error: Exception) -> Callable[[], str]:
        def fn() -> str:
            nonlocal calls
            calls += 1
            if calls <= fail_times:
                raise error
            return "ok"

        return fn

    policy = RetryPolicy(max_attempts=4, base_delay_s=0.01)
    transient = OSError("AWS Error SLOW_DOWN during PutObject operation")
    assert call_with_retry(flaky(3, transient), policy, is_transient, sleep=slept.append) == "ok"
    assert calls == 4 and len(slept) == 3

    calls = 0
    with pytest.raises(RetriesExhausted) as err:
        call_with_retry(flaky(10, transient), policy, is_transient, sleep=slept.append)
    assert calls == 4 and err.value.attempts == 4 and err.value.last is transient

    calls = 0
    denied = OSError("AWS Error ACCESS_DENIED during HeadObject operation")
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        call_with_retry(flaky(10, denied), policy, is_transient, sleep=slept.append)
    assert calls == 1


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ("AWS Error UNKNOWN (HTTP status 503) during HeadObject operation: No response body.", True),
        ("AWS Error UNKNOWN (HTTP status 500) during HeadObject operation", True),
        ("AWS Error UNKNOWN (HTTP status 429) during CreateMultipartUpload operation", True),
        ("AWS Error SLOW_DOWN during ListObjectsV2 operation: Please reduce", True),
        ("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect", True),
        ("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 52, Empty reply", True),
        ("curlCode: 28, Timeout was reached", True),
        ("AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream", True),
        ("AWS Error ACCESS_DENIED during HeadObject operation: No response body.", False),
        ("AWS Error UNKNOWN (HTTP status 403) during CreateMultipartUpload operation", False),
        ("AWS Error UNKNOWN (HTTP status 400) during HeadObject operation", False),
        ("AWS Error NO_SUCH_BUCKET during ListObjectsV2 operation", False),
        ("Cannot read past end of file", False),
    ],
)
def test_transient_classification(message: str, transient: bool) -> None:
    assert is_transient(OSError(message)) is transient
    assert not is_transient(FileNotFoundError(2, message))


def test_local_maps_hold_no_file_descriptor_and_unmap_with_their_last_view(tmp_path: Path) -> None:
    """A mapped SST must not keep a descriptor open: thousands of mapped SSTs in one process ran
    py4j's select() past its 1024 limit and hung Spark callbacks. A map is released (unmapped)
    once nothing views it, and reads the file's bytes copy-on-write."""
    import gc

    import numpy as np

    store = LocalObjectStore(tmp_path / "objects")
    payloads = {f"o/{i}": os.urandom(5000 + i) for i in range(300)}
    for path, data in payloads.items():
        store.put(path, data)
    fds_before = len(os.listdir("/proc/self/fd"))
    views = {path: store.map(path) for path in payloads}
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2, "a mapped object keeps a descriptor"
    for path, view in views.items():
        assert view is not None and bytes(view) == payloads[path]
    arr = np.frombuffer(views["o/7"], np.uint8)  # a view of a view keeps the map alive
    arr[0] ^= 0xFF  # copy-on-write: the file is unchanged
    assert store.get("o/7") == payloads["o/7"]
    folder = str(tmp_path / "objects" / "o")

    def mapped_here() -> set[str]:
        lines = Path("/proc/self/maps").read_text().splitlines()
        return {line.split()[-1] for line in lines if line.split()[-1].startswith(folder)}

    assert len(mapped_here()) == 300
    del views, view
    gc.collect()
    assert mapped_here() == {f"{folder}/7"}, "only the map numpy still views stays"
    assert arr[1] == payloads["o/7"][1]
    del arr
    gc.collect()
    assert not mapped_here()
