"""Issue 24: a new URL source's first downloads start while the orchestrator starts up, and the
ingest step takes them over instead of fetching the URLs again.

Real local HTTP server, real download session, readers, Lance (local and moto S3 tables) and,
for the command, the real ``prx-data run`` with Dagster: its first request reaches the server
before the ``raw_samples`` step has started, and every URL is requested once.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from prx_data.core.schema import Status
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.early_downloads import start_first_downloads
from prx_data.ingest.http.download_session import DownloadSession, shared_session
from prx_data.ingest.registry import DownloadConfig
from prx_data_tests.http_fixtures import LOCAL_NETWORKS, HTTPTestServer, Response
from prx_data_tests.ingest.test_download_pipeline import JPEG, content, url_source, write_list

pytestmark = pytest.mark.timeout(240)


def _routes(server: HTTPTestServer, n: int, prefix: str = "e") -> list[str]:
    for i in range(n):
        server.add_route(f"/{prefix}{i}.jpg", JPEG, headers={"Content-Type": "image/jpeg"})
    return [server.url(f"/{prefix}{i}.jpg") for i in range(n)]


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_stream_takes_over_early_downloads_and_fetches_only_the_rest(http_server: HTTPTestServer):
    urls = _routes(http_server, 10)
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, concurrency=4, per_host=4)
    with DownloadSession(config) as session:
        # A repeated URL and a rejected one are not started; the limit counts what started.
        early = [(f"k{i}", u) for i, u in enumerate(urls[:5])] + [("again", urls[0]), ("bad", "ftp://x/y.jpg")]
        assert session.start_early(early, limit=4) == 4
        _until(lambda: sum(http_server.hits(f"/e{i}.jpg") for i in range(4)) == 4)
        out = dict(session.stream(((i, f"k{i}", u) for i, u in enumerate(urls)), then=lambda r: (r, threading.current_thread().name)))
    assert sorted(out) == list(range(10))
    for i in range(10):
        result, _thread = out[i]
        assert result.status is Status.OK and result.data == JPEG and result.url == urls[i]
        assert http_server.hits(f"/e{i}.jpg") == 1, i  # none fetched twice


def test_early_downloads_nobody_claims_are_dropped_with_the_session(http_server: HTTPTestServer):
    urls = _routes(http_server, 3, "u")
    with DownloadSession(DownloadConfig(allow_networks=LOCAL_NETWORKS, concurrency=2, per_host=2)) as session:
        assert session.start_early([(f"k{i}", u) for i, u in enumerate(urls)], limit=3) == 3
        _until(lambda: all(http_server.hits(f"/u{i}.jpg") == 1 for i in range(3)))
    assert session._early == {}
    with pytest.raises(RuntimeError, match="closed"):
        next(session.stream([(0, "k", urls[0])]))
    assert session.start_early([("k", urls[0])], limit=1) == 0


def test_unclaimed_early_downloads_are_stopped_so_the_exit_does_not_wait_for_their_retries(http_server: HTTPTestServer):
    from prx_data.ingest.http.download_session import drop_early_downloads

    def slow_503(req):
        req.wait(0.5)
        return Response(503, b"busy")

    http_server.add_route("/busy.jpg", slow_503)
    config = DownloadConfig(allow_networks=LOCAL_NETWORKS, concurrency=2, per_host=2, retries=3, backoff_s=0.01)
    session = shared_session(config)
    try:
        assert session.start_early([("k", http_server.url("/busy.jpg"))], limit=1) == 1
        (future, _stop) = session._early[http_server.url("/busy.jpg")]
        _until(lambda: http_server.hits("/busy.jpg") == 1)
        started = time.monotonic()
        drop_early_downloads()  # what the command does once its source runs are over
        result = future.result(timeout=10)
        assert time.monotonic() - started < 2.0
        assert result.status is not Status.OK and http_server.hits("/busy.jpg") == 1  # not retried
        assert session._early == {}
    finally:
        from prx_data.ingest.http import download_session

        download_session._close_shared()


def test_a_new_url_source_is_ingested_once_with_its_first_downloads_started_early(
    http_server: HTTPTestServer, tmp_path: Path, storage_root
):
    urls = _routes(http_server, 40, "n")
    # The list on the root's own storage: on S3, the early reader lists and reads it there too.
    write_list(tmp_path / "list.jsonl", urls)
    location = storage_root.put("sources", "list.jsonl", data=(tmp_path / "list.jsonl").read_bytes())
    source = url_source(location, tmp_path, concurrency=4, per_host=4)
    assert source.remote == location.startswith("s3://")
    uri = storage_root.uri("lance", "urls.lance")
    try:
        thread = start_first_downloads(source, uri, storage_root.options)
        assert thread is not None
        thread.join(30)
        # The stream's look-ahead (2 x concurrency) is on the wire before the step starts.
        _until(lambda: sum(http_server.hits(f"/n{i}.jpg") for i in range(40)) == 8)
        stats = ingest_source(source, uri, storage_options=storage_root.options)
        assert stats.rows_by_status == {"ok": 40}
        assert [http_server.hits(f"/n{i}.jpg") for i in range(40)] == [1] * 40
        assert shared_session(source.spec.download)._early == {}  # every early download was claimed
        assert {r["status"] for r in content(uri, storage_root.options)} == {"ok"}

        # An ingested source: its change detection decides what to fetch, so nothing starts early.
        thread = start_first_downloads(source, uri, storage_root.options)
        if thread is not None:
            thread.join(30)
        assert shared_session(source.spec.download)._early == {}
        assert [http_server.hits(f"/n{i}.jpg") for i in range(40)] == [1] * 40
    finally:
        from prx_data.ingest.http import download_session

        download_session._close_shared()


def test_only_a_url_list_read_in_this_process_starts_early(tmp_path: Path):
    source = url_source(str(tmp_path / "list.jsonl"), tmp_path)
    two_workers = source.spec.model_copy(update={"workers": 2})
    assert start_first_downloads(type(source)(two_workers, source.path), str(tmp_path / "t.lance")) is None


def test_the_command_requests_its_first_image_before_the_ingest_step_starts(http_server: HTTPTestServer, tmp_path: Path, monkeypatch):
    from prx_data.app.cli import main
    from prx_data.core.settings import get_settings

    first: list[float] = []

    def image(_req):
        first.append(time.time())
        return Response(200, JPEG, {"Content-Type": "image/jpeg"})

    for i in range(6):
        http_server.add_route(f"/c{i}.jpg", image)
    root = tmp_path / "data"
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    write_list(root / "list.jsonl", [http_server.url(f"/c{i}.jpg") for i in range(6)])
    (root / "sources" / "web.yaml").write_text(
        "name: web\nshape: jsonl\nlocation: ../list.jsonl\n"
        "fields: {key: id, image: u, image_kind: url, caption: c}\n"
        f"download: {{allow_networks: {LOCAL_NETWORKS}}}\n"
    )
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            code = main(["run", "--root", str(root)])
    finally:
        get_settings.cache_clear()
    assert code == 0, out.getvalue()
    assert [http_server.hits(f"/c{i}.jpg") for i in range(6)] == [1] * 6
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (run,) = [r for r in instance.get_runs() if r.job_name == "source_pipeline"]
        starts = [e.timestamp for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START) if e.step_key == "raw_samples"]
    assert len(starts) == 1 and min(first) < starts[0], (min(first), starts)
