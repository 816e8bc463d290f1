"""No private fetches: every connection a download makes goes to a vetted public address.

URL lists come from outside. A URL (or a redirect, or a DNS answer that changes between two
lookups) pointing at ``169.254.169.254``, ``127.0.0.1``, ``2130706433``, ``0x7f.1``,
``[::ffff:10.0.0.1]`` or a private network must never be fetched. The check cannot live in the
URL: notations are endless and DNS answers change. It lives where the socket is made:
:class:`GuardedBackend` (an httpcore network backend) resolves the host itself, refuses the
connection if any address is not public, and connects to the very address it checked, so DNS
rebinding cannot slip another address in between. Every redirect hop opens its connection
through the same backend.

The same backend enforces the download's overall deadline: every socket read, write and
connect gets at most the time left, so a server trickling one byte per second cannot hold a
worker past the deadline (the per-read timeout alone would never fire).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from prx_data.compat.httpx_backend import set_network_backend

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_local = threading.local()


class AddressRefused(Exception):
    """The host resolves to an address downloads may not reach."""

    def __init__(self, host: str, address: str, why: str) -> None:
        super().__init__(f"refused: {host} resolves to {address} ({why})")
        self.host = host
        self.address = address
        self.why = why


class DeadlineExceeded(httpcore.TimeoutException):
    """The download's overall deadline passed (a subclass of httpcore's timeouts)."""


def set_deadline(deadline: float | None) -> None:
    """Monotonic time by which this thread's current download must be done (None: none)."""
    _local.deadline = deadline


def _remaining(timeout: float | None) -> float | None:
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("download deadline exceeded")
    return left if timeout is None else min(timeout, left)


def parse_networks(networks: Iterable[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(n, strict=False) for n in networks)


def refusal(address: IPAddress, allow: tuple = ()) -> str | None:
    """Why ``address`` may not be fetched, or None when it is a public (or allowed) address."""
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address):
        # The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64) is checked too.
        for embedded in (address.ipv4_mapped, address.sixtofour, address.teredo and address.teredo[1]):
            if embedded is not None:
                candidates.append(embedded)
        if address in ipaddress.ip_network("64:ff9b::/96"):
            candidates.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if any(a in net for a in candidates for net in allow if a.version == net.version):
        return None
    # The embedded IPv4 address first: it is where the connection really goes.
    for a in reversed(candidates):
        for name in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private", "site_local"):
            if getattr(a, f"is_{name}", False):
                return name.replace("_", "-")
        if not a.is_global:
            return "not a public address"
    return None


def resolve(host: str, port: int) -> list[tuple[Any, ...]]:
    """getaddrinfo for a TCP connection; every notation (decimal, octal, hex) goes through it."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from None


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _remaining(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _remaining(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's sync backend, connecting only to vetted addresses, within the deadline."""

    def __init__(self, allow: tuple = ()) -> None:
        self.allow = allow

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        infos = resolve(host, port)
        if not infos:
            raise httpcore.ConnectError(f"cannot resolve {host}: no address")
        # Refuse when any answer is not public: a name that also points inside is not trusted.
        for info in infos:
            address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
            why = refusal(address, self.allow)
            if why is not None:
                raise AddressRefused(host, str(address), why)
        last: Exception | None = None
        for *_, sockaddr in infos:
            try:
                # An IP literal: httpcore's own backend connects to the address checked above,
                # with no second lookup; TLS still verifies the host name httpcore passes on.
                stream = super().connect_tcp(sockaddr[0], sockaddr[1], _remaining(timeout), local_address, socket_options)
            except (httpcore.ConnectTimeout, httpcore.ConnectError) as exc:
                last = exc
                continue
            return _DeadlineStream(stream)
        raise last or httpcore.ConnectError(f"cannot connect to {host}")

    def connect_unix_socket(self, *args, **kwargs):
        raise httpcore.ConnectError("unix sockets are not fetched")


def install(transport: Any, allow: tuple = ()) -> None:
    """Make an ``httpx.HTTPTransport`` connect through :class:`GuardedBackend`."""
    set_network_backend(transport, GuardedBackend(allow))
