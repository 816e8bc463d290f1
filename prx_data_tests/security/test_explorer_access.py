"""The explorer on a non-loopback address: refused without --allow-remote, and with it a warning
and a per-start token checked on every request. Opted-out samples get no preview unless asked.
Traffic stays in-process (Starlette's TestClient); no public address is bound."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from prx_data.explorer import app as app_module
from prx_data.explorer.security import check_bind
from prx_data_tests import images


@pytest.fixture
def small_corpus(tmp_path: Path):
    """Two ingested images; an opt-out request (applied after ingest) names one of them."""
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import load_settings
    from prx_data.curation.optout.requests import apply_requests
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    data = tmp_path / "data"
    (data / "sources").mkdir(parents=True)
    (data / "optout").mkdir()
    folder = data / "inputs"
    folder.mkdir()
    for i in range(2):
        (folder / f"p{i}.jpg").write_bytes(images.jpeg(320, 240, seed=70 + i))
    (data / "sources" / "pics.yaml").write_text(f"name: pics\nshape: image_folder\nlocation: {folder}\n")
    settings = load_settings({"PRX_DATA_ROOT": str(data)})
    paths = StoragePaths.from_settings(settings)
    ingest_source(load_registry(settings.sources_dir).get("pics"), paths.raw_table("pics"))
    (data / "optout" / "r.yaml").write_text(json.dumps({"id": "r1", "source_keys": ["pics:p0.jpg"]}))
    report = apply_requests(paths, settings.optout_dir, ["pics"])
    assert report.matched.num_rows == 1
    return settings


def _client(app):
    from starlette.testclient import TestClient

    return TestClient(app, base_url="http://testserver")


def test_bind_rules():
    assert check_bind("127.0.0.1", False, True) is None and check_bind("::1", False, False) is None
    assert "--allow-remote" in (check_bind("0.0.0.0", False, False) or "")
    assert check_bind("0.0.0.0", True, False) is None
    assert "loopback" in (check_bind("192.0.2.7", True, True) or "")


def test_main_refuses_a_public_host_without_the_flag(monkeypatch, capsys):
    called = []
    monkeypatch.setattr(app_module, "serve", lambda *a, **k: called.append(a))
    assert app_module.main(["--host", "0.0.0.0"]) == 2
    assert app_module.main(["--host", "0.0.0.0", "--allow-remote", "--show-opted-out"]) == 2
    assert not called and "--allow-remote" in capsys.readouterr().err


def test_remote_serve_warns_prints_a_token_once_and_enforces_it(small_corpus, monkeypatch, capsys):
    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    app_module.serve("0.0.0.0", 8765, small_corpus, allow_remote=True)
    out, err = capsys.readouterr()
    assert "WARNING" in err and "0.0.0.0" in err and started["host"] == "0.0.0.0"
    [token] = re.findall(r"\?token=([A-Za-z0-9_\-]+)", out + err)
    assert len(token) >= 40 and (out + err).count(token) == 1
    assert started["access_log"] is False  # a first request's ?token= would land in the log

    client = _client(started["app"])
    for path in ("/", "/healthz", "/stats", "/style.css"):
        assert client.get(path).status_code == 401, path
    assert client.get("/healthz", headers={"x-prx-token": token[:-1] + "x"}).status_code == 401
    assert client.get("/healthz", headers={"x-prx-token": token}).text == "ok"
    assert client.get("/healthz", headers={"authorization": f"Bearer {token}"}).status_code == 200
    # The printed link sets a cookie and drops the token from the address.
    first = client.get(f"/stats?token={token}", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/stats"
    assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
    assert client.get("/stats").status_code == 200  # the cookie from now on

    # A second start has another token; the first no longer opens it.
    app_module.serve("0.0.0.0", 8765, small_corpus, allow_remote=True)
    assert _client(started["app"]).get("/healthz", headers={"x-prx-token": token}).status_code == 401


def test_loopback_serve_needs_no_token(small_corpus, monkeypatch, capsys):
    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    app_module.serve("127.0.0.1", 8765, small_corpus)
    assert "token" not in capsys.readouterr().out
    assert _client(started["app"]).get("/healthz", headers={"host": "127.0.0.1"}).text == "ok"


def test_opted_out_samples_get_no_preview_unless_asked(small_corpus):
    from prx_data.core.ids import sample_id
    from prx_data.explorer.app import build_app

    opted, kept = sample_id("pics", "p0.jpg"), sample_id("pics", "p1.jpg")
    client = _client(build_app(small_corpus))
    for kind in ("thumb", "preview"):
        hidden = client.get(f"/{kind}/pics/{opted}")
        assert hidden.headers["x-prx-preview"] == "opted-out" and hidden.headers["content-type"].startswith("image/svg")
        assert client.get(f"/{kind}/pics/{kept}").headers["content-type"] == "image/jpeg"
    shown = _client(build_app(small_corpus, show_opted_out=True)).get(f"/preview/pics/{opted}")
    assert shown.headers["content-type"] == "image/jpeg"
