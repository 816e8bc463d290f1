"""Credentials in source URLs never reach a table, lineage or the explorer; the download still
uses the URL as given, and an opt-out request naming the original URL still matches. On a local
root and on moto S3."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from prx_data.core.urls import REDACTED, redact_text, redact_url, url_key
from prx_data_tests import images
from prx_data_tests.http_fixtures import LOCAL_NETWORKS

SECRETS = ("S3cretPassw0rd", "SIGVALUEdeadbeef", "CREDVALUE4242", "TOKVALUE7777", "SESSIONTOKzz9")


def test_redact_url_forms():
    assert redact_url("http://alice:S3cretPassw0rd@host/x.jpg") == "http://host/x.jpg"
    signed = redact_url("https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4&x-amz-signature=abc&X-Amz-Credential=AK%2Fx&w=1")
    assert signed == f"https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4&x-amz-signature={REDACTED}&X-Amz-Credential={REDACTED}&w=1"
    assert redact_url("https://h/a.jpg?SIG=1#access_token=2") == f"https://h/a.jpg?SIG={REDACTED}#access_token={REDACTED}"
    plain = "https://h/a%20b.jpg?w=10&h=20"
    assert redact_url(plain) is plain and redact_url(None) is None
    assert redact_text("redirect to 'http://u:pw@h/a?token=t1': refused") == f"redirect to 'http://h/a?token={REDACTED}': refused"
    assert url_key("https://h/a", b"k1") != url_key("https://h/a", b"k2") and len(url_key("https://h/a", b"k1") or "") == 64


def _urls(http_server) -> dict[str, str]:
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        http_server.add_route(f"/{name}.jpg", images.jpeg(320, 240, seed=seed), headers={"Content-Type": "image/jpeg"})
    base = http_server.url("/").rstrip("/")
    host = base.removeprefix("http://")
    return {
        "a": f"http://alice:S3cretPassw0rd@{host}/a.jpg",
        "b": f"{base}/b.jpg?X-Amz-Signature=SIGVALUEdeadbeef&X-Amz-Credential=CREDVALUE4242&X-Amz-Security-Token=SESSIONTOKzz9&w=1",
        "c": f"{base}/c.jpg?token=TOKVALUE7777",
    }


@pytest.fixture
def ingested(storage_root, http_server, tmp_path: Path, monkeypatch):  # noqa: F811
    from prx_data.core.settings import get_settings
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    urls = _urls(http_server)
    data = tmp_path / "data"
    (data / "sources").mkdir(parents=True)
    (data / "optout").mkdir()
    records = data / "sources" / "web.jsonl"
    records.write_text("".join(json.dumps({"id": k, "u": u}) + "\n" for k, u in urls.items()))
    (data / "sources" / "web.yaml").write_text(
        "name: web\nshape: jsonl\nlocation: web.jsonl\n"
        "fields: {key: id, image: u, image_kind: url}\n"
        f"download: {{allow_networks: {json.dumps(LOCAL_NETWORKS)}, retries: 0, timeout_s: 5}}\n"
    )
    for name in (
        "PRX_LANCE_ROOT",
        "PRX_MDS_ROOT",
        "PRX_SOURCES_DIR",
        "PRX_OPTOUT_DIR",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "PRX_S3_ENDPOINT",
        "PRX_URL_HASH_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PRX_DATA_ROOT", str(data))
    monkeypatch.setenv("PRX_LANCE_ROOT", storage_root.uri("lance"))
    monkeypatch.setenv("PRX_MDS_ROOT", storage_root.uri("mds"))
    if storage_root.server:
        for name, value in storage_root.server.env().items():
            monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    settings = get_settings()
    source = load_registry(settings.sources_dir).get("web")
    uri = f"{settings.lance_root}/sources/web.lance"
    stats = ingest_source(source, uri, storage_options=settings.storage_options or None)
    yield settings, urls, stats
    get_settings.cache_clear()


def test_stored_urls_hold_no_credential(ingested, storage_root, http_server):  # noqa: F811
    import lance

    settings, urls, stats = ingested
    assert dict(stats.rows_by_status) == {"ok": 3}, "the download used the original URLs"
    assert http_server.hits("/a.jpg") == http_server.hits("/b.jpg") == 1
    ds = lance.dataset(f"{settings.lance_root}/sources/web.lance", storage_options=settings.storage_options or None)
    rows = {r["source_key"]: r for r in ds.to_table(columns=["source_key", "source_url", "source_url_key"]).to_pylist()}
    assert rows["a"]["source_url"] == urls["a"].replace("alice:S3cretPassw0rd@", "")
    assert f"X-Amz-Signature={REDACTED}" in rows["b"]["source_url"] and rows["b"]["source_url"].endswith("&w=1")
    assert all(len(r["source_url_key"]) == 64 for r in rows.values())
    # Every byte of every file of the tables (data, manifests, indexes) and of the key file.
    files = storage_root.files("lance")
    assert any(rel.startswith("_keys/") for rel in files)
    leaks = [(rel, s) for rel, blob in files.items() for s in SECRETS if s.encode() in blob]
    assert not leaks

    # A second run with nothing changed rewrites nothing (the digest compares redacted forms).
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    again = ingest_source(
        load_registry(settings.sources_dir).get("web"),
        f"{settings.lance_root}/sources/web.lance",
        storage_options=settings.storage_options or None,
    )
    assert (again.new, again.updated, again.metadata_updated, again.unchanged) == (0, 0, 0, 3)


def test_lineage_by_original_url_shows_only_the_redacted_form(ingested):
    from prx_data.app.cli import main

    _settings, urls, _ = ingested
    for key, url in urls.items():
        for extra in ([], ["--json"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(["lineage", "--url", url, *extra])
            text = out.getvalue()
            assert code == 0, text
            assert f"web : {key}" in text or f'"source_key": "{key}"' in text
            assert not [s for s in SECRETS if s in text], text


def test_explorer_sample_page_shows_only_the_redacted_form(ingested):
    from starlette.testclient import TestClient

    from prx_data.core.ids import sample_id
    from prx_data.explorer.app import build_app

    settings, urls, _ = ingested
    with TestClient(build_app(settings)) as client:
        for key in urls:
            page = client.get(f"/sample/web/{sample_id('web', key)}")
            assert page.status_code == 200
            assert "127.0.0.1" in page.text and not [s for s in SECRETS if s in page.text]
        assert REDACTED in client.get(f"/sample/web/{sample_id('web', 'b')}").text


def test_optout_by_the_original_url_matches(ingested):
    from prx_data.core.ids import sample_id
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.optout.requests import apply_requests

    settings, urls, _ = ingested
    stranger = urls["c"].replace("c.jpg", "zzz.jpg")
    request = {"id": "req-1", "urls": [urls["a"], urls["b"], stranger]}
    (Path(settings.optout_dir) / "req-1.yaml").write_text(json.dumps(request))
    report = apply_requests(StoragePaths.from_settings(settings), settings.optout_dir, ["web"], settings.storage_options or None)
    assert sorted(report.matched["sample_id"].to_pylist()) == sorted([sample_id("web", "a"), sample_id("web", "b")])
    # A URL that differs only in its signature is another URL: no match by the redacted form.
    other_signature = urls["b"].replace("SIGVALUEdeadbeef", "SIGVALUEother")
    # (another request: req-1 stays in force even once its file is gone, until withdrawn on purpose)
    (Path(settings.optout_dir) / "req-1.yaml").unlink()
    (Path(settings.optout_dir) / "req-2.yaml").write_text(json.dumps({"id": "req-2", "urls": [other_signature]}))
    report = apply_requests(StoragePaths.from_settings(settings), settings.optout_dir, ["web"], settings.storage_options or None)
    assert report.matched.filter(pc.field("request_id") == "req-2").num_rows == 0
    audit = json.dumps(report.audit.to_pylist(), default=str)
    assert "SIGVALUEother" not in audit and "TOKVALUE7777" not in audit


def test_a_broken_request_stays_in_force_by_url_without_storing_its_credentials(ingested):
    """The audit keeps each request's last applied version (so a typo never re-admits its
    samples); its URLs are kept as keyed hashes, never as written."""
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.optout.requests import apply_requests

    settings, urls, _ = ingested
    paths = StoragePaths.from_settings(settings)
    request_file = Path(settings.optout_dir) / "req-9.yaml"
    request_file.write_text(json.dumps({"id": "req-9", "urls": [urls["b"]]}))
    first = apply_requests(paths, settings.optout_dir, ["web"], settings.storage_options or None)
    request_file.write_text("id: req-9\nurls: [unclosed\n")  # a typo
    kept = apply_requests(paths, settings.optout_dir, ["web"], settings.storage_options or None)
    assert kept.matched["sample_id"].to_pylist() == first.matched["sample_id"].to_pylist() != []
    stored = json.dumps(kept.audit.to_pylist(), default=str)
    assert not [s for s in SECRETS if s in stored]
