"""An in-memory object store for tests.

Data lives in a process-local registry keyed by name, so two stores opened with the same name
(or a store and its unpickled copy in the same process) share objects. In another process the
same name is a different, empty store.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from piestream.common.errors import ObjectNotFound, StorageError
from piestream.storage.object_store.base import ObjectMeta, ObjectStore, check_path, check_range


class _Objects:
    """The shared state behind every store of one name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, tuple[bytes, float]] = {}


_REGISTRY: dict[str, _Objects] = {}
_REGISTRY_LOCK = threading.Lock()


def _resolve(name: str) -> _Objects:
    with _REGISTRY_LOCK:
        return _REGISTRY.setdefault(name, _Objects())


class InMemoryObjectStore(ObjectStore):
    """A dict behind a lock. Without a name, a fresh unique one is made."""

    def __init__(self, name: str | None = None) -> None:
        self._name = name if name is not None else uuid.uuid4().hex
        if not self._name or any(c in self._name for c in "/?#@:"):
            raise StorageError(f"invalid in-memory store name {self._name!r}: it must fit a memory:// URL")
        self._objects: _Objects | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def url(self) -> str:
        return f"memory://{self._name}"

    def _state(self) -> _Objects:
        if self._objects is None:
            self._objects = _resolve(self._name)
        return self._objects

    def __getstate__(self) -> dict[str, Any]:
        return {"_name": self._name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._name = state["_name"]
        self._objects = None

    def put(self, path: str, data: bytes) -> None:
        check_path(path)
        objects = self._state()
        with objects.lock:
            objects.data[path] = (bytes(data), time.time())

    def get(self, path: str) -> bytes:
        return self._entry(path)[0]

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        data = self._entry(path)[0]
        check_range(path, offset, length, len(data))
        return data[offset : offset + length]

    def size(self, path: str) -> int:
        return len(self._entry(path)[0])

    def exists(self, path: str) -> bool:
        check_path(path)
        objects = self._state()
        with objects.lock:
            return path in objects.data

    def delete(self, path: str) -> None:
        check_path(path)
        objects = self._state()
        with objects.lock:
            objects.data.pop(path, None)

    def list(self, prefix: str = "") -> list[ObjectMeta]:
        objects = self._state()
        with objects.lock:
            items = [(p, len(d), t) for p, (d, t) in objects.data.items() if p.startswith(prefix)]
        return [ObjectMeta(p, size, mtime) for p, size, mtime in sorted(items)]

    def _entry(self, path: str) -> tuple[bytes, float]:
        check_path(path)
        objects = self._state()
        with objects.lock:
            entry = objects.data.get(path)
        if entry is None:
            raise ObjectNotFound(f"object {path!r} not found in {self.url}")
        return entry
