"""The dashboard's HTTP server: a thread serving the pages of one `Database`."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from piestream.server.dashboard.pages import job_page, overview_page

if TYPE_CHECKING:
    from piestream.server.database import Database

log = logging.getLogger(__name__)

DEFAULT_DASHBOARD_PORT = 5691  # RisingWave's dashboard port


class Dashboard:
    """Serves the dashboard on (host, port) in a daemon thread; port 0 picks a free one."""

    def __init__(self, db: Database, host: str = "127.0.0.1", port: int = DEFAULT_DASHBOARD_PORT) -> None:
        self.db = db
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                dashboard._get(self)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("dashboard: " + format, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host = host
        self.port = int(self.httpd.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

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

    def _get(self, req: BaseHTTPRequestHandler) -> None:
        path = urlparse(req.path).path
        try:
            if path == "/":
                status, body = 200, overview_page(self.db)
            elif path.startswith("/job/"):
                page = job_page(self.db, unquote(path[len("/job/") :]))
                status, body = (200, page) if page is not None else (404, "<h1>no such streaming job</h1>")
            elif path == "/health":
                status, body = 200, "ok"
            else:
                status, body = 404, "<h1>not found</h1>"
        except Exception:  # a page must not take the server down; the log has the details
            log.exception("dashboard page %s failed", path)
            status, body = 500, "<h1>internal error</h1><p>see the server log</p>"
        data = body.encode()
        req.send_response(status)
        req.send_header("Content-Type", "text/html; charset=utf-8" if body != "ok" else "text/plain")
        req.send_header("Content-Length", str(len(data)))
        req.send_header("Cache-Control", "no-store")
        req.end_headers()
        req.wfile.write(data)
