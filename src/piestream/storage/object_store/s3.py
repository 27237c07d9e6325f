"""An S3-compatible object store over `pyarrow.fs.S3FileSystem`.

Spark's own S3A connector is not shipped with the pyspark wheel, so all LSM I/O goes through
pyarrow (reference: spark-notes §7.2). pyarrow's internal retries are switched off
(`AwsStandardS3RetryStrategy(max_attempts=1)`) so that `retry.RetryPolicy` is the single
policy in force: transient failures are classified from pyarrow's OSError text and retried with
backoff; permanent ones become StorageError / ObjectNotFound at once, with the path in the message.

Atomicity: pyarrow uploads through a multipart upload that only becomes visible on
CompleteMultipartUpload, so a reader sees a whole object or none, and a failed or retried put
never publishes a prefix of the data.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from pyarrow import fs as pafs

from piestream.common.errors import ObjectNotFound, StorageError
from piestream.storage.object_store.base import ObjectMeta, ObjectStore, check_path, check_range
from piestream.storage.object_store.retry import RetriesExhausted, RetryPolicy, call_with_retry

T = TypeVar("T")

# What pyarrow / the AWS SDK say for throttling, server errors, timeouts and broken connections.
_TRANSIENT = re.compile(
    r"HTTP status (?:5\d\d|429|408)|SLOW_DOWN|SERVICE_UNAVAILABLE|THROTTLING|INTERNAL_FAILURE"
    r"|NETWORK_CONNECTION|REQUEST_TIMEOUT|curlCode: (?:7|28|52|55|56)\b|timed out|timeout"
    r"|connection (?:reset|refused|aborted)",
    re.IGNORECASE,
)


def is_transient(error: BaseException) -> bool:
    """Whether an S3 call failed in a way that a later identical call may not (5xx, 429, network).

    404s, 403s, 400s and everything unrecognised are permanent: retrying them only delays the error.
    """
    if isinstance(error, FileNotFoundError) or not isinstance(error, OSError):
        return False
    return _TRANSIENT.search(str(error)) is not None


@dataclass(frozen=True)
class S3Config:
    """Everything needed to reconnect; this is all an S3ObjectStore pickles."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None  # e.g. "http://127.0.0.1:9000"; None means AWS itself
    region: str = "us-east-1"
    access_key: str | None = None  # None: the usual AWS env vars / config files
    secret_key: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)


_URL_PARAMS = {"endpoint", "region", "access_key", "secret_key", "max_attempts"}


class S3ObjectStore(ObjectStore):
    """Objects under `s3://bucket/prefix/`; the bucket is created on first use if missing."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise StorageError(f"invalid S3 bucket name {bucket!r}")
        if (access_key is None) != (secret_key is None):
            raise StorageError("S3 access_key and secret_key must be given together")
        _split_endpoint(endpoint)  # fail here, not on first use in some Spark worker
        # Pin the region now: left unset, the AWS SDK may probe EC2 metadata, which is slow off-EC2.
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        retry = retry or RetryPolicy()
        self._init(S3Config(bucket, prefix.strip("/"), endpoint, region, access_key, secret_key, retry))

    def _init(self, config: S3Config) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._fs: pafs.S3FileSystem | None = None
        self._fs_pid = 0
        self._bucket_ready = False

    @classmethod
    def from_url(cls, url: str) -> S3ObjectStore:
        """Parse `s3://bucket/prefix?endpoint=..&region=..&access_key=..&secret_key=..&max_attempts=..`."""
        parts = urlsplit(url)
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = set(params) - _URL_PARAMS
        if parts.scheme != "s3" or not parts.netloc or unknown:
            why = f": unknown parameters {sorted(unknown)}" if unknown else ": want s3://bucket/prefix?.."
            raise StorageError(f"invalid S3 URL {_redact(url)!r}{why}")
        retry = None
        if "max_attempts" in params:
            if not params["max_attempts"].isdigit() or int(params["max_attempts"]) < 1:
                raise StorageError(f"invalid S3 URL {_redact(url)!r}: want max_attempts >= 1")
            retry = RetryPolicy(max_attempts=int(params["max_attempts"]))
        return cls(
            parts.netloc,
            parts.path,
            endpoint=params.get("endpoint"),
            region=params.get("region"),
            access_key=params.get("access_key"),
            secret_key=params.get("secret_key"),
            retry=retry,
        )

    @property
    def config(self) -> S3Config:
        return self._config

    @property
    def url(self) -> str:
        """The reopening URL. It carries explicit credentials when given, so do not log it."""
        c = self._config
        query: dict[str, str] = {"region": c.region}
        if c.endpoint:
            query["endpoint"] = c.endpoint
        if c.access_key is not None and c.secret_key is not None:
            query["access_key"], query["secret_key"] = c.access_key, c.secret_key
        if c.retry.max_attempts != RetryPolicy().max_attempts:
            query["max_attempts"] = str(c.retry.max_attempts)
        return f"s3://{c.bucket}/{c.prefix}?{urlencode(query)}"

    def __repr__(self) -> str:
        return f"S3ObjectStore({_redact(self.url)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self._config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._init(state["config"])

    # --- connection -------------------------------------------------------------------------

    def _filesystem(self) -> pafs.S3FileSystem:
        """This process's S3 client, made on first use (and again after a fork)."""
        with self._lock:
            if self._fs is None or self._fs_pid != os.getpid():
                c = self._config
                scheme, host = _split_endpoint(c.endpoint)
                self._fs = pafs.S3FileSystem(
                    access_key=c.access_key,
                    secret_key=c.secret_key,
                    region=c.region,
                    scheme=scheme,
                    endpoint_override=host,
                    background_writes=False,  # surface upload errors in write(), not in a later close()
                    allow_bucket_creation=True,
                    retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
                )
                self._fs_pid = os.getpid()
                self._bucket_ready = False
            s3 = self._fs
            if not self._bucket_ready:
                self._ensure_bucket(s3)
            return s3

    def _ensure_bucket(self, s3: pafs.S3FileSystem) -> None:
        """Create the bucket if missing. Best effort: without the right to create (or even to
        HEAD) it, the bucket may still exist, and the real operation will report what is wrong.
        Only running out of retries is an error here, since then nothing else would work either."""
        try:
            call_with_retry(lambda: s3.create_dir(self._config.bucket), self._config.retry, is_transient)
        except RetriesExhausted as e:
            raise StorageError(f"S3 bucket {self._config.bucket!r} unreachable: {e}") from e
        except OSError:
            pass
        self._bucket_ready = True

    def _key(self, path: str) -> str:
        check_path(path)
        c = self._config
        return f"{c.bucket}/{c.prefix}/{path}" if c.prefix else f"{c.bucket}/{path}"

    def _call(self, op: str, path: str, fn: Callable[[pafs.S3FileSystem], T]) -> T:
        """Run one operation under the retry policy and translate its errors."""
        where = f"s3://{self._key(path) if path else self._config.bucket}"
        s3 = self._filesystem()
        try:
            return call_with_retry(lambda: fn(s3), self._config.retry, is_transient)
        except RetriesExhausted as e:
            raise StorageError(f"S3 {op} of {where} failed: {e}") from e
        except FileNotFoundError as e:
            raise ObjectNotFound(f"object {path!r} not found at {where}") from e
        except OSError as e:
            raise StorageError(f"S3 {op} of {where} failed: {e}") from e

    # --- operations -------------------------------------------------------------------------

    def put(self, path: str, data: bytes) -> None:
        key = self._key(path)

        def upload(s3: pafs.S3FileSystem) -> None:
            with s3.open_output_stream(key) as out:
                out.write(data)

        self._call("put", path, upload)

    def get(self, path: str) -> bytes:
        key = self._key(path)

        def download(s3: pafs.S3FileSystem) -> bytes:
            with s3.open_input_file(key) as f:
                return f.read()

        return self._call("get", path, download)

    def get_range(self, path: str, offset: int, length: int) -> bytes:
        key = self._key(path)

        def read_range(s3: pafs.S3FileSystem) -> bytes:
            with s3.open_input_file(key) as f:
                check_range(path, offset, length, f.size())
                return f.read_at(length, offset) if length else b""

        data = self._call("get_range", path, read_range)
        if len(data) != length:
            raise StorageError(f"short read of object {path!r}: {len(data)} of {length} bytes")
        return data

    def size(self, path: str) -> int:
        key = self._key(path)

        def head(s3: pafs.S3FileSystem) -> int:
            with s3.open_input_file(key) as f:  # one HEAD; get_file_info would also LIST on a miss
                return f.size()

        return self._call("size", path, head)

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except ObjectNotFound:
            return False
        return True

    def delete(self, path: str) -> None:
        key = self._key(path)
        with contextlib.suppress(ObjectNotFound):
            self._call("delete", path, lambda s3: s3.delete_file(key))

    def list(self, prefix: str = "") -> list[ObjectMeta]:
        c = self._config
        root = f"{c.bucket}/{c.prefix}" if c.prefix else c.bucket
        head = prefix.rpartition("/")[0]
        selector = pafs.FileSelector(f"{root}/{head}" if head else root, recursive=True, allow_not_found=True)
        infos = self._call("list", "", lambda s3: s3.get_file_info(selector))
        found = []
        for info in infos:
            rel = info.path[len(root) + 1 :]
            # Directories are pyarrow's view of common prefixes and of the empty "dir/" marker
            # objects it writes when a delete empties a prefix; they are not objects here.
            if info.type == pafs.FileType.File and rel.startswith(prefix):
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                found.append(ObjectMeta(rel, info.size or 0, mtime))
        found.sort(key=lambda m: m.path)
        return found


def _split_endpoint(endpoint: str | None) -> tuple[str, str | None]:
    """("http", "host:port") from "http://host:port"; a bare "host:port" means https."""
    if not endpoint:
        return "https", None
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StorageError(f"invalid S3 endpoint {endpoint!r}: want http(s)://host[:port]")
    return parts.scheme, parts.netloc


def _redact(url: str) -> str:
    return re.sub(r"(secret_key=)[^&]*", r"\1***", url)
