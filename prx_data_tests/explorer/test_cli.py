"""``prx-data explore`` arguments reach ``serve``; --root puts every table and tree under it."""

from __future__ import annotations

import prx_data.explorer.app as app_module
from prx_data.explorer.security import allowed_hosts_for


def test_main_passes_host_port_and_root(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(app_module, "serve", lambda host, port, settings, **flags: calls.append((host, port, settings)))
    monkeypatch.setenv("PRX_LANCE_ROOT", "/somewhere/else/lance")
    assert app_module.main(["--port", "9123", "--root", str(tmp_path)]) == 0
    [(host, port, settings)] = calls
    assert (host, port) == ("127.0.0.1", 9123)
    assert settings.lance_root == f"{tmp_path}/lance" and settings.mds_root == f"{tmp_path}/mds"


def test_loopback_server_only_answers_loopback_names():
    loopback = allowed_hosts_for("127.0.0.1")
    assert loopback is not None and "localhost" in loopback and "attacker.example" not in loopback
    assert allowed_hosts_for("::1") is not None
    assert allowed_hosts_for("0.0.0.0") is None  # bound to a network on purpose: any name
