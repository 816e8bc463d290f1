"""The download guard's hook into httpx: every connection goes through our backend."""

from __future__ import annotations

import httpcore
import httpx
import pytest

from prx_data.compat import httpx_backend
from prx_data_tests.http_fixtures import HTTPTestServer, http_server  # noqa: F401  (fixture)


def test_installed_httpx_is_the_version_the_adapter_was_written_for() -> None:
    assert httpx_backend.version_mismatch() is None, httpx_backend.version_mismatch()


class _Recording(httpcore.SyncBackend):
    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    def connect_tcp(self, host, port, *args, **kwargs):
        self.connects.append((host, port))
        return super().connect_tcp(host, port, *args, **kwargs)


def test_every_connection_goes_through_the_installed_backend(http_server: HTTPTestServer) -> None:
    http_server.add_route("/a", b"ok")
    transport = httpx.HTTPTransport()
    backend = _Recording()
    httpx_backend.set_network_backend(transport, backend)
    with httpx.Client(transport=transport) as client:
        assert client.get(http_server.url("/a")).content == b"ok"
        assert client.get(http_server.url("/a", host="localhost")).content == b"ok"
    assert backend.connects == [("127.0.0.1", http_server.port), ("localhost", http_server.port)]


def test_a_transport_without_the_expected_pool_is_refused_loudly() -> None:
    with pytest.raises(RuntimeError, match="cannot install a network backend"):
        httpx_backend.set_network_backend(httpx.MockTransport(lambda r: httpx.Response(200)), httpcore.SyncBackend())
