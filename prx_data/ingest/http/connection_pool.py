"""GET requests over kept-alive connections, each made through the address guard.

The download step's HTTP client, on the standard library's ``http.client``. httpx cost
1.5-1.8 ms of CPU per 125-200 KB image against 0.3-0.4 ms here (most of it h11's parsing in
pure Python; ``benchmarks/bench_url_ingest.py --breakdown``, rows "client alone"), and that
CPU held the GIL the step's probe and writer wait for.

- Every connection is made by :func:`netguard.connect` (public addresses only, the checked
  address is the one connected to) and is reused only for the same scheme, host and port.
- Every socket read and write gets at most what is left of the download's deadline
  (``netguard.remaining``), headers included: a trickling server cannot outlive it.
- No proxy from the environment, no redirect following, no decoding of the body: the caller
  vets each hop and inflates a compressed body under its size cap.
- A kept-alive connection the server closed while idle is retried once on a new connection,
  before any byte of an answer has been read (the request never reached a handler).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import ssl
import threading
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

from prx_data.ingest.http import netguard

__all__ = ["InvalidURL", "Pool"]

# Characters a request target may carry as they are; anything else (spaces, non-ASCII) is
# percent-encoded, as browsers and httpx do. '%' stays: the URL's own escapes are kept.
_TARGET_SAFE = "!$&'()*+,;=:@/?%-._~[]"
_READ_BUFFER = 64 * 1024


class InvalidURL(ValueError):
    """The URL cannot be requested (bad port, a host that does not encode)."""


class _DeadlineReader(io.RawIOBase):
    """The socket as http.client reads it: each read waits at most the time left."""

    def __init__(self, owner: _DeadlineSocket) -> None:
        self._owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        sock = self._owner.sock
        sock.settimeout(netguard.remaining(self._owner.timeout))
        return sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            super().close()
            self._owner.reader_closed()


class _DeadlineSocket:
    """What http.client needs of a socket, each read and write within the deadline.

    Like a real socket with ``makefile``, the socket stays open until its readers are closed
    too: http.client closes the connection as soon as it has the headers of a response that
    ends the connection (HTTP/1.0, ``Connection: close``), and reads the body afterwards.
    """

    def __init__(self, sock: socket.socket, timeout: float | None) -> None:
        self.sock = sock
        self.timeout = timeout
        self._readers = 0
        self._closed = False

    def makefile(self, mode: str = "rb", *args, **kwargs) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_DeadlineReader(self), _READ_BUFFER)

    def sendall(self, data) -> None:
        self.sock.settimeout(netguard.remaining(self.timeout))
        self.sock.sendall(data)

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closed and not self._readers:
            self.sock.close()

    def close(self) -> None:
        self._closed = True
        if not self._readers:
            self.sock.close()


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, timeout: float, allow: tuple, tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=timeout)
        # http.client writes the port into the Host header unless it is this one: an HTTPS URL
        # on 443 must send "Host: name", or a signed URL (S3, GCS, CDNs sign the host) fails.
        self.default_port = 443 if tls is not None else 80
        self._allow = allow
        self._tls = tls

    def connect(self) -> None:
        sock = netguard.connect(self.host, self.port, self.timeout, self._allow)
        if self._tls is not None:
            try:
                sock.settimeout(netguard.remaining(self.timeout))
                # The name from the URL, not the address connected to: the certificate must
                # be the host's (an IP literal is checked against the certificate's IPs).
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        self.sock = _DeadlineSocket(sock, self.timeout)  # type: ignore[assignment]


Key = tuple[str, str, int]


class Pool:
    """Idle connections by (scheme, host, port), shared by a session's download threads.

    A connection is in use by one thread at a time; the lock covers only the idle lists.
    ``max_idle``: idle connections kept across all hosts (more are closed when handed back).
    ``tls``: what HTTPS certificates are verified with (default: certifi's CA bundle).
    """

    def __init__(
        self, *, user_agent: str, timeout_s: float, allow: tuple = (), max_idle: int = 64, tls: ssl.SSLContext | None = None
    ) -> None:
        # http.client adds Host and Accept-Encoding: identity; Accept as browsers and httpx
        # send it, since some firewalls turn away requests without one.
        self._headers = {"User-Agent": user_agent, "Accept": "*/*"}
        self._timeout = timeout_s
        self._allow = allow
        self._max_idle = max_idle
        self._idle: dict[Key, list[_Connection]] = {}
        self._n_idle = 0
        self._lock = threading.Lock()
        self._tls = tls
        self._closed = False

    @contextlib.contextmanager
    def get(self, url: str) -> Iterator[http.client.HTTPResponse]:
        """The response to ``GET url``, headers read, body left to the caller.

        The connection goes back to the pool only when the body was read to its end;
        leaving early (a redirect, an error status, a cap) closes it.
        """
        key, target = _split(url)
        conn = self._take(key)
        reused = conn is not None
        if conn is None:
            conn = self._new(key)
        response: http.client.HTTPResponse | None = None
        try:
            try:
                response = self._send(conn, target)
            except (ConnectionError, http.client.BadStatusLine):
                if not reused:
                    raise
                conn.close()
                conn = self._new(key)
                response = self._send(conn, target)
            yield response
        except BaseException:
            _close(conn, response)
            raise
        # http.client closes a response whose body ended, except one with a Content-Length
        # read exactly to its end: that one is done when nothing of it is left.
        whole = response.isclosed() or response.length == 0
        if whole and not response.will_close:
            response.close()
            self._give_back(key, conn)
        else:
            _close(conn, response)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle, self._n_idle = self._idle, {}, 0
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _send(self, conn: _Connection, target: str) -> http.client.HTTPResponse:
        try:
            conn.request("GET", target, headers=self._headers)
        except http.client.InvalidURL as exc:
            raise InvalidURL(str(exc)) from None
        return conn.getresponse()

    def _new(self, key: Key) -> _Connection:
        scheme, host, port = key
        try:
            return _Connection(host, port, self._timeout, self._allow, self._tls_context() if scheme == "https" else None)
        except http.client.InvalidURL as exc:  # a control character or space in the host
            raise InvalidURL(str(exc)) from None

    def _tls_context(self) -> ssl.SSLContext:
        # Made on first use: loading the CA bundle costs tens of ms a plain-HTTP run never needs.
        with self._lock:
            if self._tls is None:
                import certifi

                self._tls = ssl.create_default_context(cafile=certifi.where())
            return self._tls

    def _take(self, key: Key) -> _Connection | None:
        with self._lock:
            conns = self._idle.get(key)
            if not conns:
                return None
            self._n_idle -= 1
            conn = conns.pop()
            if not conns:
                del self._idle[key]
            return conn

    def _give_back(self, key: Key, conn: _Connection) -> None:
        with self._lock:
            if not self._closed and self._n_idle < self._max_idle:
                self._idle.setdefault(key, []).append(conn)
                self._n_idle += 1
                return
        conn.close()


def _close(conn: _Connection, response: http.client.HTTPResponse | None) -> None:
    # Both: a response that ends its connection holds the socket after the connection let go.
    conn.close()
    if response is not None:
        response.close()


def _split(url: str) -> tuple[Key, str]:
    """((scheme, host, port), request target) of an http(s) URL."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or (443 if scheme == "https" else 80)
        # A host name goes on the wire and to DNS in its ASCII (IDNA) form.
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as exc:
        raise InvalidURL(str(exc)) from None
    target = quote(parts.path or "/", safe=_TARGET_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_TARGET_SAFE)
    return (scheme, host, port), target
