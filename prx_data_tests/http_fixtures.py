"""The one local HTTP server for tests that need real sockets (downloads, model servers).

Usage from any test module::

    from prx_data_tests.http_fixtures import http_server, Response, flaky  # noqa: F401

    def test_it(http_server):
        http_server.add_route("/a.png", b"...", headers={"Content-Type": "image/png"})
        http_server.add_route("/flaky", flaky(2, then=b"ok"))
        url = http_server.url("/a.png")
        ...
        assert http_server.hits("/flaky") == 3
        assert http_server.max_concurrent("/a.png") <= 4

A route is either bytes (served with status 200) or a callable ``handler(request) -> Response |
bytes``; it answers GET, HEAD and POST (``request.body`` holds what was posted, ``request.json()``
decodes it). Handlers run on the server's request threads, so they may block (use
``request.wait(seconds)`` rather than ``time.sleep`` so teardown is not held up).
"""

from __future__ import annotations

import json
import socket
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

__all__ = [
    "LOCAL_NETWORKS",
    "HTTPTestServer",
    "Request",
    "Response",
    "chunked",
    "flaky",
    "free_port",
    "json_response",
    "http_server",
    "redirect",
    "slow",
    "status",
    "trickle",
]


# Downloads refuse loopback addresses unless a spec allows them (download.allow_networks):
# tests that fetch from this server name these explicitly.
LOCAL_NETWORKS = ["127.0.0.0/8", "::1/128"]


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    _closing: threading.Event = field(repr=False)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)

    def wait(self, seconds: float) -> None:
        """Sleep, but wake up early when the server shuts down."""
        self._closing.wait(seconds)


@dataclass
class Response:
    status: int = 200
    # An iterable of chunks is sent with Transfer-Encoding: chunked (no Content-Length).
    body: bytes | Iterable[bytes] = b""
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], "Response | bytes"]


class HTTPTestServer:
    """A ThreadingHTTPServer on 127.0.0.1 with per-test routes and per-route counters."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._routes: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self._hits: dict[str, int] = defaultdict(int)
        self._active: dict[str, int] = defaultdict(int)
        self._max_active: dict[str, int] = defaultdict(int)
        self._total_active = 0
        self._max_total_active = 0
        self._connections = 0
        self.requests: list[Request] = []
        self.closing = threading.Event()
        self._httpd = _Server((host, 0), _make_handler_class(self))
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> HTTPTestServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> HTTPTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- routes and URLs -----------------------------------------------------------------------

    def url(self, path: str, host: str | None = None) -> str:
        """``host`` lets a test reach the same server under another name (e.g. ``localhost``)."""
        if not path.startswith("/"):
            path = "/" + path
        return f"http://{host or self.host!s}:{self.port}{path}"

    def add_route(
        self,
        path: str,
        handler_or_bytes: Handler | bytes,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Register ``path`` (query string ignored when matching).

        With bytes, ``status`` and ``headers`` describe the response. With a callable they are
        merged into whatever it returns (the handler's own values win).
        """
        extra = dict(headers or {})
        if isinstance(handler_or_bytes, (bytes, bytearray)):
            body = bytes(handler_or_bytes)

            def handler(req: Request) -> Response:
                return Response(status, body, dict(extra))

        else:
            inner = handler_or_bytes

            def handler(req: Request) -> Response:
                out = inner(req)
                if not isinstance(out, Response):
                    out = Response(status, out)
                out.headers = {**extra, **out.headers}
                return out

        with self._lock:
            self._routes[path] = handler

    # -- observations --------------------------------------------------------------------------

    def hits(self, path: str) -> int:
        with self._lock:
            return self._hits[path]

    def connections(self) -> int:
        """TCP connections accepted so far (keep-alive serves many requests on one)."""
        with self._lock:
            return self._connections

    def max_concurrent(self, path: str | None = None) -> int:
        """Most requests ever in progress at once, for one route or for the whole server.

        A request counts from the moment its handler starts until its response is written.
        """
        with self._lock:
            return self._max_total_active if path is None else self._max_active[path]

    # -- internals -----------------------------------------------------------------------------

    def _enter(self, path: str, request: Request) -> Handler | None:
        with self._lock:
            self.requests.append(request)
            self._hits[path] += 1
            self._active[path] += 1
            self._total_active += 1
            self._max_active[path] = max(self._max_active[path], self._active[path])
            self._max_total_active = max(self._max_total_active, self._total_active)
            return self._routes.get(path)

    def _leave(self, path: str) -> None:
        with self._lock:
            self._active[path] -= 1
            self._total_active -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Handlers blocked in a slow route must not hold up teardown.
    block_on_close = False

    def handle_error(self, request, client_address) -> None:  # noqa: ANN001
        # Clients that abort mid-body (size limits, timeouts) are expected in these tests;
        # a traceback per aborted connection would only bury real failures.
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout, TimeoutError)):
            return
        super().handle_error(request, client_address)


def _make_handler_class(server: HTTPTestServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so that chunked bodies and keep-alive behave like a real server.
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._connections += 1

        def do_GET(self) -> None:  # noqa: N802
            self._serve(send_body=True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._serve(send_body=False)

        def do_POST(self) -> None:  # noqa: N802
            self._serve(send_body=True)

        def _serve(self, send_body: bool) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            request = Request(
                method=self.command,
                path=parts.path,
                query=parts.query,
                headers={k.lower(): v for k, v in self.headers.items()},
                _closing=server.closing,
                body=self.rfile.read(length) if length else b"",
            )
            handler = server._enter(parts.path, request)
            try:
                if handler is None:
                    response = Response(404, b"no such route")
                else:
                    out = handler(request)
                    response = out if isinstance(out, Response) else Response(200, out)
                self._write(response, send_body)
            finally:
                server._leave(parts.path)

        def _write(self, response: Response, send_body: bool) -> None:
            self.send_response(response.status)
            names = {k.lower() for k in response.headers}
            for name, value in response.headers.items():
                self.send_header(name, value)
            body = response.body
            if isinstance(body, (bytes, bytearray)):
                if "content-length" not in names:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if not send_body:
                return
            for chunk in body:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    return _Handler


# -- handler factories ------------------------------------------------------------------------


def status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Handler:
    """Always answer ``code``."""
    return lambda _req: Response(code, body, dict(headers or {}))


def flaky(
    fail_times: int,
    *,
    then: bytes = b"ok",
    fail_status: int = 500,
    fail_headers: dict[str, str] | None = None,
) -> Handler:
    """Answer ``fail_status`` for the first ``fail_times`` requests, then 200 with ``then``."""
    lock = threading.Lock()
    count = 0

    def handler(_req: Request) -> Response:
        nonlocal count
        with lock:
            count += 1
            n = count
        if n <= fail_times:
            return Response(fail_status, b"try again", dict(fail_headers or {}))
        return Response(200, then)

    return handler


def slow(delay_s: float, body: bytes = b"ok") -> Handler:
    """Wait ``delay_s`` before sending anything (headers included)."""

    def handler(req: Request) -> Response:
        req.wait(delay_s)
        return Response(200, body)

    return handler


def trickle(interval_s: float, total: int = 1000, byte: bytes = b"x") -> Handler:
    """Send one byte every ``interval_s`` (chunked): no single read ever times out."""

    def body(req: Request) -> Iterator[bytes]:
        for _ in range(total):
            if req._closing.is_set():
                return
            yield byte
            req.wait(interval_s)

    return lambda req: Response(200, body(req))


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})})


def free_port() -> int:
    """A loopback port nothing listens on (for "server is down" tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redirect(location: str, code: int = 302) -> Handler:
    return lambda _req: Response(code, b"", {"Location": location})


def chunked(total: int, chunk_size: int = 16 * 1024) -> Handler:
    """A body of ``total`` bytes sent chunked, so the client cannot know its size up front."""

    def body() -> Iterator[bytes]:
        left = total
        while left > 0:
            n = min(chunk_size, left)
            yield b"x" * n
            left -= n

    return lambda _req: Response(200, body())


@pytest.fixture
def http_server() -> Iterator[HTTPTestServer]:
    with HTTPTestServer() as server:
        yield server
