"""An S3 endpoint under load: a proxy on 127.0.0.1 in front of moto that answers a share of
requests with S3's ``503 SlowDown`` (what a busy bucket sends) and forwards the rest unchanged.

Requests are forwarded with their own ``Host`` header and body, so signatures made for the
proxy's address verify at moto. The share is drawn per request from a seeded generator; the
proxy counts what it throttled and what it forwarded.
"""

from __future__ import annotations

import http.client
import random
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>PRXTHROTTLE</RequestId></Error>"
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


@dataclass
class ThrottleCounts:
    forwarded: int = 0
    throttled: int = 0
    by_method: dict[str, int] = field(default_factory=dict)  # throttled, per HTTP method


class ThrottleProxy:
    def __init__(self, upstream: str, share: float = 0.15, seed: int = 0):
        target = urlparse(upstream)
        self.upstream_host, self.upstream_port = target.hostname or "127.0.0.1", target.port or 80
        self.share = share
        self.counts = ThrottleCounts()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args) -> None:
                pass

            def _body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    throttle = proxy._rng.random() < proxy.share
                    if throttle:
                        proxy.counts.throttled += 1
                        proxy.counts.by_method[self.command] = proxy.counts.by_method.get(self.command, 0) + 1
                    else:
                        proxy.counts.forwarded += 1
                if throttle:
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(SLOW_DOWN)))
                    self.send_header("Retry-After", "0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOW_DOWN)
                    return
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP and name.lower() != "content-length" and name.lower() != "expect":
                            conn.putheader(name, value)
                    conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body)
                    response = conn.getresponse()
                    data = response.read()
                    self.send_response(response.status, response.reason)
                    for name, value in response.getheaders():
                        if name.lower() not in _HOP and name.lower() != "content-length":
                            self.send_header(name, value)
                    upstream_length = response.getheader("Content-Length")
                    self.send_header("Content-Length", upstream_length if self.command == "HEAD" and upstream_length else str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ThrottleProxy:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()
