"""The dashboard's HTTP server: a thread serving the pages of one `Database`."""

from __future__ import annotations

import base64
import contextlib
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from piestream.server.dashboard.metrics import CONTENT_TYPE, MetricsEndpoint
from piestream.server.dashboard.pages import job_page, overview_page
from piestream.server.pgwire.auth import ScramVerifier

if TYPE_CHECKING:
    from piestream.server.database import Database
    from piestream.server.pgwire.server import PgServer

log = logging.getLogger(__name__)

DEFAULT_DASHBOARD_PORT = 5691  # RisingWave's dashboard port


class _HttpServer(ThreadingHTTPServer):
    """With a TLS context, each connection's handshake runs in its own thread (a slow or
    clear-text client never blocks the accept loop) and a failed one just closes it."""

    ssl_context: ssl.SSLContext | None = None

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            try:
                request.settimeout(10.0)
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log.debug("dashboard: TLS handshake with %s failed: %s", client_address, e)
                with contextlib.suppress(OSError):
                    request.close()
                return
        super().process_request_thread(request, client_address)


class Dashboard:
    """Serves the dashboard on (host, port) in a daemon thread; port 0 picks a free one.
    `/metrics` is the Prometheus endpoint (with `pgwire`, the wire protocol's numbers too);
    with `ssl_context` (the wire protocol's certificate) it serves HTTPS only; with
    `require_login` every page but /health asks for a role's name and password (HTTP Basic,
    checked against the role's SCRAM verifier; Prometheus' `basic_auth` sends it)."""

    def __init__(
        self,
        db: Database,
        host: str = "127.0.0.1",
        port: int = DEFAULT_DASHBOARD_PORT,
        *,
        pgwire: PgServer | None = None,
        ssl_context: ssl.SSLContext | None = None,
        require_login: bool = False,
    ) -> None:
        self.db = db
        self.require_login = require_login  # HTTP Basic with a role's password (SCRAM-verified)
        self.metrics = MetricsEndpoint(db, pgwire)
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                dashboard._get(self)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("dashboard: " + format, *args)

        self.httpd = _HttpServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.ssl_context = ssl_context
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.httpd.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}/"

    def start(self) -> Dashboard:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="piestream-dashboard", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _logged_in(self, req: BaseHTTPRequestHandler) -> bool:
        header = req.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        role = self.db.roles.get(user)
        verifier = ScramVerifier.parse(role.password) if role is not None and role.password else None
        if role is not None and role.login and verifier is not None and verifier.matches(password):
            return True
        log.warning('dashboard: login failed for user "%s" from %s', user, req.client_address[0])
        return False

    def _get(self, req: BaseHTTPRequestHandler) -> None:
        path = urlparse(req.path).path
        ctype = "text/html; charset=utf-8"
        if self.require_login and path != "/health" and not self._logged_in(req):
            body = b"<h1>login required</h1>"
            req.send_response(401)
            req.send_header("WWW-Authenticate", 'Basic realm="piestream", charset="UTF-8"')
            req.send_header("Content-Type", ctype)
            req.send_header("Content-Length", str(len(body)))
            req.end_headers()
            req.wfile.write(body)
            return
        try:
            if path == "/":
                status, body = 200, overview_page(self.db).encode()
            elif path.startswith("/job/"):
                page = job_page(self.db, unquote(path[len("/job/") :]))
                status, body = (
                    (200, page.encode()) if page is not None else (404, b"<h1>no such streaming job</h1>")
                )
            elif path == "/metrics":
                status, body, ctype = 200, self.metrics.scrape(), CONTENT_TYPE
            elif path == "/health":
                status, body, ctype = 200, b"ok", "text/plain"
            else:
                status, body = 404, b"<h1>not found</h1>"
        except Exception:  # a page must not take the server down; the log has the details
            log.exception("dashboard page %s failed", path)
            status, body = 500, b"<h1>internal error</h1><p>see the server log</p>"
            ctype = "text/html; charset=utf-8"
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.send_header("Cache-Control", "no-store")
        req.end_headers()
        req.wfile.write(body)
