"""No private fetches: every connection a download makes goes to a vetted public address.

URL lists come from outside. A URL (or a redirect, or a DNS answer that changes between two
lookups) pointing at ``169.254.169.254``, ``127.0.0.1``, ``2130706433``, ``0x7f.1``,
``[::ffff:10.0.0.1]`` or a private network must never be fetched. The check cannot live in the
URL: notations are endless and DNS answers change. It lives where the socket is made:
:func:`connect` resolves the host itself, refuses the connection if any address is not public,
and connects to the very address it checked, so DNS rebinding cannot slip another address in
between. Every redirect hop opens its connection through it (``connection_pool``).

The same module holds the download's overall deadline: every socket read, write and connect
gets at most the time left (:func:`remaining`), so a server trickling one byte per second
cannot hold a worker past the deadline (the per-read timeout alone would never fire).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_local = threading.local()


class AddressRefused(Exception):
    """The host resolves to an address downloads may not reach."""

    def __init__(self, host: str, address: str, why: str) -> None:
        super().__init__(f"refused: {host} resolves to {address} ({why})")
        self.host = host
        self.address = address
        self.why = why


class DeadlineExceeded(TimeoutError):
    """The download's overall deadline passed."""


class ConnectFailed(ConnectionError):
    """No connection could be made (the name does not resolve, or no address answers)."""


def set_deadline(deadline: float | None) -> None:
    """Monotonic time by which this thread's current download must be done (None: none)."""
    _local.deadline = deadline


def remaining(timeout: float | None) -> float | None:
    """``timeout`` cut to what is left of this thread's deadline; raises past it."""
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
        raise ConnectFailed(f"cannot resolve {host}: {exc}") from None


def connect(host: str, port: int, timeout: float | None, allow: tuple = ()) -> socket.socket:
    """A TCP socket to ``host``, connected to an address checked here, within the deadline."""
    infos = resolve(host, port)
    if not infos:
        raise ConnectFailed(f"cannot resolve {host}: no address")
    # Refuse when any answer is not public: a name that also points inside is not trusted.
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        why = refusal(address, allow)
        if why is not None:
            raise AddressRefused(host, str(address), why)
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(remaining(timeout))
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    if isinstance(last, TimeoutError):
        raise last
    raise ConnectFailed(f"cannot connect to {host}: {last}")
