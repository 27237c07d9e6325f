"""The object store: where SST files and manifests live (local directory, memory, or S3).

`open_object_store(url)` is how every process (driver or Spark worker) gets a store; a store's
`url` reopens it elsewhere, and stores pickle as configuration only.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from piestream.common.errors import StorageError
from piestream.storage.object_store.base import ObjectMeta, ObjectStore
from piestream.storage.object_store.local import LocalObjectStore
from piestream.storage.object_store.memory import InMemoryObjectStore
from piestream.storage.object_store.retry import RetriesExhausted, RetryPolicy, call_with_retry
from piestream.storage.object_store.s3 import S3Config, S3ObjectStore

__all__ = [
    "InMemoryObjectStore",
    "LocalObjectStore",
    "ObjectMeta",
    "ObjectStore",
    "RetriesExhausted",
    "RetryPolicy",
    "S3Config",
    "S3ObjectStore",
    "call_with_retry",
    "open_object_store",
]


def open_object_store(url: str) -> ObjectStore:
    """A store for `url`: "file:///abs/dir" or a plain path, "memory://name", or
    "s3://bucket/prefix?endpoint=..&region=..&access_key=..&secret_key=.."."""
    if "://" not in url:
        return LocalObjectStore(Path(url))
    parts = urlsplit(url)
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and not parts.query:
        return LocalObjectStore(Path(unquote(parts.path)))
    if parts.scheme == "memory" and parts.netloc and parts.path in ("", "/"):
        return InMemoryObjectStore(parts.netloc)
    if parts.scheme == "s3":
        return S3ObjectStore.from_url(url)
    shown = url.partition("?")[0]  # never echo query parameters: they may hold a secret key
    raise StorageError(f"unsupported object store URL {shown!r}: want file://, memory:// or s3://")
