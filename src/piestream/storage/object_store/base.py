"""The object store contract that Hummock writes SSTs and manifests through.

Everything above this layer sees a flat namespace of immutable-ish blobs addressed by
'/'-separated relative paths. The contract is the intersection of what a local directory and S3
can promise cheaply: whole-object atomic puts, ranged reads, prefix listing. There is no rename
and no append, so nothing above may depend on them. Nor may a path be both an object and a
directory of others ("a" and "a/b"): S3 allows it, a local directory cannot hold it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from piestream.common.errors import StorageError


@dataclass(frozen=True)
class ObjectMeta:
    """One listed object: its store-relative path, size in bytes and mtime in Unix seconds."""

    path: str
    size: int
    last_modified: float


class ObjectStore(ABC):
    """A flat, thread-safe blob store.

    Implementations must be picklable and pickle only their configuration: stores travel to Spark
    workers inside closures and reconnect lazily there.
    """

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Publish `data` under `path` atomically: a reader sees the whole object or none of it."""

    def put_deferred(self, path: str, data: bytes) -> None:
        """`put`, atomic alike, but durable only once `make_durable` has returned for `path`.

        Writers whose objects matter only after a later commit (an epoch's SSTs: meta commits
        them once every actor has reported) publish with this, and the committer makes the whole
        batch durable at once: a local directory then syncs many files together instead of
        waiting for the disk once per object. The default is a plain `put` (a remote store's put
        is durable when it returns)."""
        self.put(path, data)

    def make_durable(self, paths: Sequence[str]) -> None:
        """Make objects published with `put_deferred` (by any process) survive a crash. Nothing to
        do where every put is durable already; a local directory raises ObjectNotFound for a
        missing object."""
        return

    @abstractmethod
    def get(self, path: str) -> bytes:
        """The whole object; ObjectNotFound if missing."""

    @abstractmethod
    def get_range(self, path: str, offset: int, length: int) -> bytes:
        """Exactly the bytes [offset, offset+length); StorageError if that runs past the end."""

    def read_into(self, path: str, offset: int, out: memoryview) -> None:
        """Fill the writable byte buffer `out` with the object's bytes [offset, offset+len(out))
        (StorageError if that runs past the end). Stores that can read straight into memory
        (a local file) override it and save a copy; the default goes through `get_range`."""
        out[:] = self.get_range(path, offset, len(out))

    def read_ranges_into(self, path: str, offsets: Sequence[int], outs: Sequence[memoryview]) -> None:
        """`read_into` of several ranges of one object: `outs[i]` gets the bytes from
        `offsets[i]`. A local file is opened once for all of them; the default reads each range
        with its own call (an object store serves one range per request)."""
        for offset, out in zip(offsets, outs, strict=True):  # one request per range
            self.read_into(path, offset, out)

    def map(self, path: str) -> memoryview | None:
        """The whole object as a private copy-on-write memory map, or None where the store
        cannot map objects (only a local file can; S3 and in-memory stores read ranges). A read
        through a mapping is zero-copy: the pages are the OS page cache's own. Writes to the
        mapping stay private to this process. Sound only for objects never changed in place,
        which the put contract gives (a put replaces the object whole)."""
        return None

    @abstractmethod
    def size(self, path: str) -> int:
        """The object's length in bytes; ObjectNotFound if missing."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether an object (not merely a prefix of other objects) is stored under `path`."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove the object; deleting a missing object is fine (vacuum may run twice)."""

    def delete_many(self, paths: Iterable[str]) -> None:
        """Remove every object in `paths`; missing ones are skipped."""
        for path in paths:
            self.delete(path)

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectMeta]:
        """Every object whose path starts with `prefix` (a plain string prefix), sorted by path."""

    @property
    @abstractmethod
    def url(self) -> str:
        """A URL that `open_object_store` turns back into an equivalent store in any process."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def check_path(path: str) -> str:
    """Reject paths that would escape a root or mean different things on different backends."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise StorageError(f"invalid object path {path!r}: want a relative 'a/b/c' name")
    return path


def check_range(path: str, offset: int, length: int, size: int) -> None:
    """Raise StorageError unless [offset, offset+length) lies inside an object of `size` bytes."""
    if offset < 0 or length < 0:
        raise StorageError(f"invalid range offset={offset} length={length} for object {path!r}")
    if offset + length > size:
        raise StorageError(
            f"range [{offset}, {offset + length}) is past the end of object {path!r} ({size} bytes)"
        )
