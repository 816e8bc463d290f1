"""The download step's HTTP client (``connection_pool.Pool``) on its own: HTTPS verified against a CA
built here, connections kept alive and a dead one replaced, the deadline on every read (headers
included), a body cut short of its Content-Length, request targets percent-encoded."""

from __future__ import annotations

import gc
import socket
import ssl
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from prx_data.core.schema import Status
from prx_data.ingest.http import netguard
from prx_data.ingest.http.connection_pool import Pool
from prx_data.ingest.http.download_session import download_many
from prx_data.ingest.registry import DownloadConfig
from prx_data_tests import tls_certs
from prx_data_tests.http_fixtures import LOCAL_NETWORKS, HTTPTestServer

pytestmark = pytest.mark.timeout(30)

LOCAL = netguard.parse_networks(LOCAL_NETWORKS)


def _pool(**kwargs) -> Pool:
    return Pool(user_agent="prx-data-test", timeout_s=2.0, allow=LOCAL, **kwargs)


def _get(pool: Pool, url: str) -> tuple[int, bytes]:
    with pool.get(url) as resp:
        return resp.status, resp.read()


# -- HTTPS ---------------------------------------------------------------------------------------


class _TLSServer:
    """An HTTPS server on 127.0.0.1 whose certificate a test CA signed for ``names``."""

    def __init__(self, names: list[str]) -> None:
        self.chain = tls_certs.chain(names)
        served: list[Any] = []
        self.connections = served

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                served.append(self.client_address)

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                body = b"over TLS " + self.path.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = self.chain.server_context().wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def trusting(self) -> ssl.SSLContext:
        return self.chain.trusting()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def tls_server():
    server = _TLSServer(["localhost", "127.0.0.1"])
    yield server
    server.close()


def test_https_is_verified_against_the_ca_and_its_connection_kept_alive(tls_server: _TLSServer):
    pool = _pool(tls=tls_server.trusting())
    try:
        for name in ("localhost", "127.0.0.1"):
            assert _get(pool, f"https://{name}:{tls_server.port}/a.jpg") == (200, b"over TLS /a.jpg")
            assert _get(pool, f"https://{name}:{tls_server.port}/b.jpg") == (200, b"over TLS /b.jpg")
    finally:
        pool.close()
    assert len(tls_server.connections) == 2  # one per host name, each kept for its second request


def test_a_certificate_nobody_trusts_fails_at_once_with_its_reason(tls_server: _TLSServer):
    # The default trust (certifi's bundle) does not know the test CA; a retry would not help.
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=3, backoff_s=0.01, timeout_s=2.0)
    (result,) = download_many([("k", f"https://localhost:{tls_server.port}/a.jpg")], config)
    assert result.status is Status.DOWNLOAD_FAILED
    assert result.error is not None
    assert result.error.startswith("TLS: ") and "certificate verify failed" in result.error
    assert result.attempts == 1


def test_a_certificate_for_another_name_is_refused():
    server = _TLSServer(["images.example.org"])
    pool = _pool(tls=server.trusting())
    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="localhost"):
            _get(pool, f"https://localhost:{server.port}/a.jpg")
    finally:
        pool.close()
        server.close()


def test_https_connects_only_through_the_address_guard(tls_server: _TLSServer):
    pool = Pool(user_agent="prx-data-test", timeout_s=2.0, tls=tls_server.trusting())  # no allow list
    try:
        with pytest.raises(netguard.AddressRefused, match="loopback"):
            _get(pool, f"https://localhost:{tls_server.port}/a.jpg")
    finally:
        pool.close()


def _raw_server(answer) -> tuple[socket.socket, int]:
    """A one-connection-at-a-time server that reads a request and calls ``answer(conn)``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                try:
                    answer(conn)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


# -- keep-alive ----------------------------------------------------------------------------------


def test_a_kept_connection_the_server_closed_is_replaced_without_an_attempt():
    """The server drops every connection after one answer (without saying so): each later
    request finds its kept connection dead and goes again on a new one, counting one attempt."""
    listener, port = _raw_server(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"))
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=0, concurrency=1, timeout_s=2.0)
    try:
        results = list(download_many([(str(i), f"http://127.0.0.1:{port}/{i}.jpg") for i in range(4)], config))
    finally:
        listener.close()
    assert [(r.status, r.data, r.attempts) for r in results] == [(Status.OK, b"abc", 1)] * 4


def test_connections_are_reused_only_after_a_whole_body(http_server: HTTPTestServer):
    http_server.add_route("/small.jpg", b"s" * 1000)
    pool = _pool()
    try:
        for _ in range(3):
            assert _get(pool, http_server.url("/small.jpg")) == (200, b"s" * 1000)
        assert http_server.connections() == 1
        # A response left before its end (as a redirect or an error status is) closes its
        # connection: the next request may not read the rest of it as its own answer.
        with pool.get(http_server.url("/small.jpg")) as resp:
            assert resp.read(10) == b"s" * 10
        assert _get(pool, http_server.url("/small.jpg")) == (200, b"s" * 1000)
        assert http_server.connections() == 2
    finally:
        pool.close()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.0 200 OK\r\n\r\n",  # HTTP/1.0: the body ends when the connection does
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 300000\r\n\r\n",
    ],
)
def test_a_response_that_ends_its_connection_is_read_whole_and_its_socket_closed(head: bytes):
    """http.client lets go of such a connection once it has the headers; the body is still
    read from the socket, which must stay open until then and be closed after, capped or not."""
    body = bytes(range(256)) * 1172  # 300,032 bytes; the Content-Length form sends 300,000
    listener, port = _raw_server(lambda conn: conn.sendall(head + body[:300000]))
    urls = [(str(i), f"http://127.0.0.1:{port}/{i}.jpg") for i in range(4)]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            whole = list(download_many(urls, DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=0, concurrency=2)))
            capped = list(download_many(urls[:1], DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=0, max_bytes=100_000)))
            gc.collect()
    finally:
        listener.close()
    assert [(r.status, r.data) for r in whole] == [(Status.OK, body[:300000])] * 4
    assert capped[0].status is Status.TOO_LARGE
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# -- deadline and truncation ---------------------------------------------------------------------


def test_headers_trickled_one_byte_at_a_time_cannot_outlive_the_deadline():
    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(100):
            conn.sendall(b"a")
            time.sleep(0.1)

    listener, port = _raw_server(trickle)
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=1, backoff_s=0.01, timeout_s=1.0, deadline_s=1.0)
    started = time.monotonic()
    try:
        (result,) = download_many([("k", f"http://127.0.0.1:{port}/a.jpg")], config)
    finally:
        listener.close()
    assert result.error is not None
    assert result.status is Status.DOWNLOAD_FAILED and "deadline of 1.0s exceeded" in result.error
    assert time.monotonic() - started < 2.5


def test_a_body_cut_short_of_its_content_length_is_a_failure_not_an_image():
    listener, port = _raw_server(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 400))
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, retries=1, backoff_s=0.01, timeout_s=2.0)
    try:
        (result,) = download_many([("k", f"http://127.0.0.1:{port}/a.jpg")], config)
    finally:
        listener.close()
    assert result.status is Status.DOWNLOAD_FAILED and result.data is None
    assert result.error == "connection error: the body ended 600 bytes short of its Content-Length (2 attempts)"


# -- request targets -----------------------------------------------------------------------------


def test_request_targets_are_percent_encoded_and_keep_their_escapes(http_server: HTTPTestServer):
    http_server.add_route("/caf%C3%A9%20au%20lait.jpg", b"coffee")
    pool = _pool()
    try:
        assert _get(pool, http_server.url("/café au lait.jpg")) == (200, b"coffee")
        assert _get(pool, http_server.url("/caf%C3%A9%20au%20lait.jpg")) == (200, b"coffee")
    finally:
        pool.close()
    assert [r.path for r in http_server.requests] == ["/caf%C3%A9%20au%20lait.jpg"] * 2
    assert {r.headers.get("user-agent") for r in http_server.requests} == {"prx-data-test"}
    assert {r.headers.get("accept") for r in http_server.requests} == {"*/*"}
    assert {r.headers.get("accept-encoding") for r in http_server.requests} == {"identity"}


@pytest.mark.parametrize(
    "url, error",
    [
        ("http://exa mple.com/a.jpg", "invalid URL: URL can't contain control characters. 'exa mple.com' (found at least ' ')"),
        ("http://example.com:99999/a.jpg", "invalid URL: Port out of range 0-65535"),
    ],
)
def test_a_url_that_cannot_be_requested_fails_without_a_retry(url: str, error: str):
    config = DownloadConfig(retries=3, backoff_s=0.01)
    (result,) = download_many([("k", url)], config)
    assert (result.status, result.error, result.attempts) == (Status.DOWNLOAD_FAILED, error, 1)


class _Wire:
    """A connected socket stand-in that keeps what is sent (the request's bytes on the wire)."""

    def __init__(self) -> None:
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data


@pytest.mark.parametrize(
    "scheme, port, host_header",
    [("https", 443, b"images.example.org"), ("http", 80, b"images.example.org"), ("https", 8443, b"images.example.org:8443")],
)
def test_the_host_header_names_the_port_only_when_it_is_not_the_scheme_default(scheme: str, port: int, host_header: bytes):
    # A signed URL (S3, GCS, a CDN) signs the Host header: "name:443" would not match "name".
    pool = _pool(tls=ssl.create_default_context())
    conn = pool._new((scheme, "images.example.org", port))
    conn.sock = wire = _Wire()  # as if connected: http.client sends on it without connecting
    conn.request("GET", "/a.jpg")
    assert b"\r\nHost: " + host_header + b"\r\n" in wire.sent
