"""Request values never reach files outside the data root, and the app never writes.

Traversal attempts go through a real HTTP server with the request line sent byte for byte
(http.client does not normalise '..' or percent-escapes the way an HTTP client library may).
"""

from __future__ import annotations

import http.client
import os
from urllib.parse import urlsplit

import pytest

from prx_data.explorer import validate

GOOD = "0" * 32

TRAVERSALS = [
    "/sample/../../../../etc/passwd",
    "/sample/web/../../../../etc/passwd",
    "/thumb/web/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/thumb/%2e%2e/" + GOOD,
    "/thumb/%2e%2e%2f%2e%2e%2fetc/" + GOOD,
    "/preview/web/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/sample//etc/passwd",
    "/sample/%2Fetc%2Fpasswd/" + GOOD,
    "/similar/web/%2Fetc%2Fpasswd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/style.css/../../../etc/passwd",
    "/lookup?id=../../etc/passwd",
    "/lookup?id=%2Fetc%2Fpasswd",
    "/?source=../../etc",
    "/?source=%2Fetc",
    "/?bucket=../../x",
    "/thumb/web/" + GOOD.upper(),
    "/sample/web/" + GOOD + "0",
    "/sample/web/" + GOOD + "%00",
]


def _raw_get(base: str, target: str, host: str | None = None) -> tuple[int, bytes]:
    parts = urlsplit(base)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or parts.netloc)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_attempts_are_refused(live_server, target):
    status, body = _raw_get(live_server, target)
    assert status in (400, 404), (target, status)
    assert b"root:" not in body


def test_live_server_answers_loopback_names_only(live_server, corpus):
    assert _raw_get(live_server, "/healthz")[0] == 200
    assert _raw_get(live_server, "/healthz", host="localhost")[0] == 200
    # DNS rebinding: a page on another origin resolving its name to 127.0.0.1.
    assert _raw_get(live_server, "/healthz", host="attacker.example")[0] == 400


@pytest.mark.parametrize(
    "url,status",
    [
        ("/?tier=1e3", 400),
        ("/?status=deleted", 400),
        ("/?label=Robert');DROP", 400),
        ("/?skipped=maybe", 400),
        ("/?page=0", 400),
        ("/?q=" + "x" * 201, 400),
        ("/?q=a%00b", 400),
        ("/?source=nope", 404),
        ("/lookup?id=xyz", 400),
    ],
)
def test_bad_values_are_rejected(client, url, status):
    assert client.get(url).status_code == status


def test_read_only(client, corpus):
    def tree():
        found = {}
        for dirpath, _dirs, files in os.walk(corpus.root):
            for name in files:
                st = os.stat(os.path.join(dirpath, name))
                found[os.path.join(dirpath, name)] = (st.st_mtime_ns, st.st_size)
        return found

    before = tree()
    sid = corpus.sid("archive", "arch-0001")
    for url in (
        "/",
        "/?q=coffee",
        "/?q=espresso&skipped=no",
        "/stats",
        f"/sample/archive/{sid}",
        f"/similar/archive/{sid}",
        f"/thumb/archive/{sid}",
        f"/preview/archive/{sid}",
    ):
        assert client.get(url).status_code == 200, url
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, "/").status_code == 405
    assert tree() == before


def test_security_headers(client):
    headers = client.get("/").headers
    assert "script-src" not in headers["content-security-policy"]  # default-src 'none' forbids scripts
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def test_inside_keeps_paths_under_the_root(tmp_path):
    root = tmp_path / "mds"
    (root / "1024").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    os.symlink(tmp_path / "secret", root / "link")
    assert validate.inside(str(root), "1024/768x1344/web/shard.00000.mds") == str(root / "1024/768x1344/web/shard.00000.mds")
    for bad in ("../secret", "1024/../../secret", "/etc/passwd", "link", "", "a\x00b"):
        assert validate.inside(str(root), bad) is None, bad


def test_like_pattern_escapes_wildcards():
    assert validate.like_contains("caption", "50%_o'k\\") == ("caption ILIKE '%50\\%\\_o''k\\\\%' ESCAPE '\\'")
