"""Storage fixtures: a real S3-compatible server (moto, standalone) and a fault-injecting proxy.

The moto server runs in a thread of the test process but speaks real HTTP on 127.0.0.1, so
pyarrow's S3 client (AWS SDK for C++ over curl) talks to it exactly as it would to S3 or MinIO.
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of a moto S3 server on a free 127.0.0.1 port, with dummy credentials in the env."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    with pytest.MonkeyPatch.context() as mp:
        for k, v in DUMMY_AWS_ENV.items():
            mp.setenv(k, v)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@dataclass
class Fault:
    """Answer the first `count` requests whose path contains `match` with `status` (an HTTP
    status, or "drop" to close the connection without a response); forward everything else."""

    status: int | str = 503
    count: int = 0
    match: str = ""


class FaultProxy:
    """A tiny HTTP reverse proxy in front of the S3 server that injects failures and counts."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.fault = Fault()
        self.matched = 0  # requests that matched the fault's `match`
        self.failed = 0  # of those, how many got the injected failure
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def arm(self, status: int | str, count: int, match: str) -> None:
        with self._lock:
            self.fault = Fault(status, count, match)
            self.matched = self.failed = 0

    def decide(self, path: str) -> int | str | None:
        """The failure to inject for a request to `path`, or None to forward it."""
        with self._lock:
            if not self.fault.match or self.fault.match not in path:
                return None
            self.matched += 1
            if self.failed < self.fault.count:
                self.failed += 1
                return self.fault.status
            return None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_HOP_BY_HOP = {"connection", "transfer-encoding", "content-length", "expect", "keep-alive"}


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # also makes http.server answer "Expect: 100-continue"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            # The AWS SDK streams uploads with chunked transfer encoding; de-chunk them.
            if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)

        def _any(self) -> None:
            body = self._body()
            fault = proxy.decide(self.path)
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif fault is not None:
                code = {503: "SlowDown", 429: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey"}
                payload = f"<Error><Code>{code.get(int(fault), 'Injected')}</Code></Error>".encode()
                self._reply(int(fault), [("Content-Type", "application/xml")], payload, len(payload))
            else:
                self._forward(body)

        def _forward(self, body: bytes) -> None:
            conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            keep = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            # A HEAD's Content-Length is the object's size: pass it through, send no body.
            length = int(resp.getheader("Content-Length") or 0) if self.command == "HEAD" else len(data)
            self._reply(resp.status, keep, data, length)

        def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes, length: int) -> None:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    return Handler


@pytest.fixture
def fault_proxy(s3_endpoint: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_endpoint)
    try:
        yield proxy
    finally:
        proxy.close()
