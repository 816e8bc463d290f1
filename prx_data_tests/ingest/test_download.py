"""download_many against a real local HTTP server (prx_data_tests.http_fixtures)."""

from __future__ import annotations

import itertools
import time
from datetime import UTC

import pytest

from prx_data.core.schema import Status
from prx_data.ingest.http.download_session import (
    DownloadResult,
    _HostLimiter,
    download_many,
    download_one,
    robots_opt_out,
)
from prx_data.ingest.registry import DownloadConfig
from prx_data_tests.http_fixtures import (
    LOCAL_NETWORKS,
    HTTPTestServer,
    Response,
    chunked,
    flaky,
    redirect,
    slow,
    status,
)

pytestmark = pytest.mark.timeout(30)

FAST = dict(timeout_s=2.0, retries=2, backoff_s=0.01, allow_networks=LOCAL_NETWORKS)


def cfg(**overrides) -> DownloadConfig:
    return DownloadConfig(**{**FAST, **overrides})


def one(url: str, **overrides) -> DownloadResult:
    results = list(download_many([("k", url)], cfg(**overrides)))
    assert len(results) == 1
    assert results[0].key == "k" and results[0].url == url
    return results[0]


def test_success_returns_bytes_and_metadata(http_server: HTTPTestServer):
    body = b"\x89PNG fake image" * 100
    http_server.add_route("/a.png", body, headers={"Content-Type": "image/png"})
    r = one(http_server.url("/a.png"))
    assert r.status is Status.OK and r.ok
    assert r.data == body
    assert r.error is None
    assert r.http_status == 200
    assert r.content_type == "image/png"
    assert r.attempts == 1


def test_user_agent_from_config(http_server: HTTPTestServer):
    http_server.add_route("/ua", b"x")
    assert one(http_server.url("/ua"), user_agent="prx-test/9").ok
    assert http_server.requests[-1].headers["user-agent"] == "prx-test/9"


def test_404_is_not_retried(http_server: HTTPTestServer):
    r = one(http_server.url("/missing"))
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error == "HTTP 404"
    assert r.http_status == 404
    assert r.attempts == 1
    assert r.data is None
    assert http_server.hits("/missing") == 1


def test_flaky_500_recovers_with_retries(http_server: HTTPTestServer):
    http_server.add_route("/flaky", flaky(2, then=b"finally"))
    r = one(http_server.url("/flaky"), retries=2)
    assert r.ok and r.data == b"finally"
    assert r.attempts == 3
    assert http_server.hits("/flaky") == 3


def test_persistent_500_gives_up_after_retries(http_server: HTTPTestServer):
    http_server.add_route("/down", status(503))
    r = one(http_server.url("/down"), retries=1)
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error == "HTTP 503 (2 attempts)"
    assert r.http_status == 503
    assert r.attempts == 2
    assert http_server.hits("/down") == 2


def test_429_honours_retry_after_up_to_cap(http_server: HTTPTestServer):
    # Retry-After says 100 s; the cap keeps the test (and a real worker) from parking that long.
    http_server.add_route("/busy", flaky(1, fail_status=429, fail_headers={"Retry-After": "100"}))
    started = time.monotonic()
    results = list(download_many([("k", http_server.url("/busy"))], cfg(), max_retry_after_s=0.2))
    elapsed = time.monotonic() - started
    assert results[0].ok and results[0].attempts == 2
    assert 0.2 <= elapsed < 5


def _http_date(seconds_ahead: float) -> str:
    from datetime import datetime, timedelta
    from email.utils import format_datetime

    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds_ahead), usegmt=True)


def test_429_honours_retry_after_given_as_an_http_date(http_server: HTTPTestServer):
    http_server.add_route("/busy", flaky(1, fail_status=429, fail_headers={"Retry-After": _http_date(2.0)}))
    started = time.monotonic()
    result = one(http_server.url("/busy"))
    # The date has whole seconds: "in 2 s" is between 1 and 2 s away; the backoff alone is 10 ms.
    assert result.ok and result.attempts == 2
    assert 0.9 <= time.monotonic() - started < 5


def test_retry_after_past_the_deadline_gives_up_at_once(http_server: HTTPTestServer):
    http_server.add_route("/later", status(503, headers={"Retry-After": _http_date(20.0)}))
    started = time.monotonic()
    result = list(download_many([("k", http_server.url("/later"))], cfg(deadline_s=3.0), max_retry_after_s=60.0))[0]
    assert result.status is Status.DOWNLOAD_FAILED and result.attempts == 1
    assert result.error is not None
    assert "no time left for a retry before the 3.0s deadline" in result.error
    assert time.monotonic() - started < 2
    assert http_server.hits("/later") == 1


def test_timeout_retries_then_fails(http_server: HTTPTestServer):
    http_server.add_route("/slow", slow(5.0))
    started = time.monotonic()
    r = one(http_server.url("/slow"), timeout_s=0.2, retries=2)
    assert time.monotonic() - started < 4
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error == "timeout after 0.2s (3 attempts)"
    assert r.attempts == 3
    assert r.http_status is None
    assert http_server.hits("/slow") == 3


def test_connection_refused_is_retried_then_fails():
    with HTTPTestServer() as gone:
        url = gone.url("/x")
    r = one(url, retries=1)
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error is not None
    assert r.error.startswith("connection error")
    assert r.error.endswith("(2 attempts)")
    assert r.attempts == 2


def test_too_large_with_content_length_rejected_before_body(http_server: HTTPTestServer):
    http_server.add_route("/big", b"x" * 5000)
    r = one(http_server.url("/big"), max_bytes=1000)
    assert r.status is Status.TOO_LARGE
    assert r.data is None
    assert r.error == "body larger than 1000 bytes (Content-Length: 5000)"
    assert r.attempts == 1


def test_too_large_chunked_aborts_while_streaming(http_server: HTTPTestServer):
    http_server.add_route("/stream", chunked(10_000_000, chunk_size=8192))
    r = one(http_server.url("/stream"), max_bytes=50_000)
    assert r.status is Status.TOO_LARGE
    assert r.data is None
    assert r.error == "body larger than 50000 bytes"


def test_chunked_body_within_limit_is_ok(http_server: HTTPTestServer):
    http_server.add_route("/stream", chunked(30_000, chunk_size=7000))
    r = one(http_server.url("/stream"), max_bytes=30_000)
    assert r.ok and r.data == b"x" * 30_000


@pytest.mark.parametrize(
    "header, directive",
    [
        ("noai", "noai"),
        ("noimageai", "noimageai"),
        ("noindex, NoAI", "noai"),
        ("otherbot: noimageai", "noimageai"),
    ],
)
def test_x_robots_tag_opt_out(http_server: HTTPTestServer, header: str, directive: str):
    http_server.add_route("/img", b"pixels", headers={"X-Robots-Tag": header})
    r = one(http_server.url("/img"))
    assert r.status is Status.OPTED_OUT
    assert r.data is None
    assert r.error == f"X-Robots-Tag: {directive}"
    assert r.http_status == 200


def test_other_robots_directives_do_not_opt_out(http_server: HTTPTestServer):
    http_server.add_route("/img", b"pixels", headers={"X-Robots-Tag": "none, noindex, nofollow"})
    assert one(http_server.url("/img")).ok


def test_robots_opt_out_parsing():
    assert robots_opt_out(["noai"]) == "noai"
    assert robots_opt_out(["googlebot: noindex", "otherbot:noai"]) == "noai"
    assert robots_opt_out(["unavailable_after: 25 Jun 2010 15:00:00 PST"]) is None
    assert robots_opt_out(["noaix", "ainoai"]) is None
    assert robots_opt_out([]) is None


@pytest.mark.parametrize(
    "url, error",
    [
        ("ftp://example.com/a.png", "scheme 'ftp' not allowed"),
        ("file:///etc/passwd", "scheme 'file' not allowed"),
        ("data:image/png;base64,AAAA", "scheme 'data' not allowed"),
        ("example.com/a.png", "URL has no scheme"),
        ("", "URL is empty"),
        ("http:///nohost", "URL has no host"),
    ],
)
def test_bad_urls_rejected_without_network(url: str, error: str):
    r = one(url)
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error == error
    assert r.attempts == 0


def test_redirect_followed(http_server: HTTPTestServer):
    http_server.add_route("/old", redirect("/new", 301))
    http_server.add_route("/new", b"moved here", headers={"Content-Type": "image/jpeg"})
    r = one(http_server.url("/old"))
    assert r.ok and r.data == b"moved here"
    assert r.url == http_server.url("/old")
    assert r.content_type == "image/jpeg"


def test_redirect_to_disallowed_scheme_rejected(http_server: HTTPTestServer):
    http_server.add_route("/sneaky", redirect("file:///etc/passwd"))
    r = one(http_server.url("/sneaky"))
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error is not None
    assert "scheme 'file' not allowed" in r.error


def test_redirect_loop_bounded(http_server: HTTPTestServer):
    http_server.add_route("/loop", redirect("/loop"))
    r = one(http_server.url("/loop"))
    assert r.status is Status.DOWNLOAD_FAILED
    assert r.error == "more than 5 redirects"
    assert http_server.hits("/loop") == 6


def test_per_host_limit_never_exceeded(http_server: HTTPTestServer):
    http_server.add_route("/c", slow(0.1))
    items = [(str(i), http_server.url(f"/c?i={i}")) for i in range(12)]
    results = list(download_many(items, cfg(concurrency=8, per_host=2)))
    assert sorted(int(r.key) for r in results) == list(range(12))
    assert all(r.ok for r in results)
    assert http_server.max_concurrent("/c") == 2


def test_global_limit_never_exceeded(http_server: HTTPTestServer):
    http_server.add_route("/c", slow(0.1))
    items = [(str(i), http_server.url("/c")) for i in range(9)]
    results = list(download_many(items, cfg(concurrency=3, per_host=16)))
    assert all(r.ok for r in results)
    assert http_server.max_concurrent("/c") == 3


def test_per_host_limit_does_not_serialise_other_hosts(http_server: HTTPTestServer):
    # "localhost" and "127.0.0.1" are different hosts to the client but the same server here.
    http_server.add_route("/c", slow(0.15))
    items = [(f"{host}-{i}", http_server.url("/c", host=host)) for i in range(3) for host in ("127.0.0.1", "localhost")]
    results = list(download_many(items, cfg(concurrency=8, per_host=1)))
    assert all(r.ok for r in results), [r.error for r in results]
    assert http_server.max_concurrent("/c") == 2


def test_streams_with_bounded_look_ahead(http_server: HTTPTestServer):
    http_server.add_route("/s", slow(0.05))
    pulled = 0

    def endless():
        nonlocal pulled
        for i in itertools.count():
            pulled += 1
            yield str(i), http_server.url(f"/s?i={i}")

    concurrency = 2
    stream = download_many(endless(), cfg(concurrency=concurrency, per_host=concurrency))
    first = next(stream)
    assert first.ok
    assert pulled <= 2 * concurrency
    taken = [first, *itertools.islice(stream, 9)]
    assert pulled <= len(taken) + 2 * concurrency
    stream.close()
    after_close = pulled
    hits = http_server.hits("/s")
    time.sleep(0.2)
    assert pulled == after_close
    assert http_server.hits("/s") == hits  # nothing left running after close


def test_many_items_all_come_back(http_server: HTTPTestServer):
    http_server.add_route("/x", b"ok")
    n = 200
    items = ((str(i), http_server.url(f"/x?i={i}")) for i in range(n))
    keys = [r.key for r in download_many(items, cfg(concurrency=16, per_host=8)) if r.ok]
    assert sorted(keys, key=int) == [str(i) for i in range(n)]


def test_mixed_good_and_bad_urls(http_server: HTTPTestServer):
    http_server.add_route("/ok", b"ok")
    items = [("good", http_server.url("/ok")), ("bad", "ftp://x/y"), ("gone", http_server.url("/nope"))]
    by_key = {r.key: r for r in download_many(items, cfg())}
    assert by_key["good"].status is Status.OK
    assert by_key["bad"].status is Status.DOWNLOAD_FAILED
    assert by_key["gone"].error == "HTTP 404"


def test_download_one(http_server: HTTPTestServer):
    http_server.add_route("/one", b"1")
    assert download_one("k", http_server.url("/one"), cfg()).data == b"1"


def test_host_limiter_forgets_idle_hosts():
    import threading

    limiter = _HostLimiter(2)
    stop = threading.Event()
    for i in range(100):
        limiter.acquire(f"h{i}", stop)
    assert len(limiter) == 100
    for i in range(100):
        limiter.release(f"h{i}")
    assert len(limiter) == 0


def test_fixture_serves_handler_responses(http_server: HTTPTestServer):
    import httpx

    http_server.add_route("/teapot", lambda req: Response(418, req.query.encode()))
    resp = httpx.get(http_server.url("/teapot?q=1"))
    assert resp.status_code == 418 and resp.content == b"q=1"


# -- politeness under throttling and work in the download threads (issue 24) --------------------


def test_retry_after_pauses_every_request_to_the_host_not_only_the_retried_one(http_server: HTTPTestServer):
    import threading

    arrivals: dict[str, float] = {}
    throttled_at: list[float] = []
    first = threading.Event()

    def busy(req):
        if not first.is_set():
            first.set()
            throttled_at.append(time.monotonic())
            return Response(429, b"", {"Retry-After": "1"})
        arrivals["busy"] = time.monotonic()
        return b"ok"

    def other(name):
        def handler(req):
            arrivals[name] = time.monotonic()
            req.wait(0.2)  # the other thread is mid-request while the 429 arrives
            return b"ok"

        return handler

    http_server.add_route("/busy", busy)
    for i in range(4):
        http_server.add_route(f"/o{i}", other(f"o{i}"))
    items = [("busy", http_server.url("/busy"))] + [(f"o{i}", http_server.url(f"/o{i}")) for i in range(4)]
    results = list(download_many(items, cfg(concurrency=2, per_host=2)))
    assert all(r.ok for r in results), [r.error for r in results]
    # Only /o0 was on the wire when the 429 came; everything after waited out the second.
    later = {name: t - throttled_at[0] for name, t in arrivals.items() if name != "o0"}
    assert min(later.values()) >= 0.95, later


def test_host_limit_halves_on_throttle_and_grows_back_one_slot_per_round():
    import threading

    limiter = _HostLimiter(8, max_pause_s=0.2)
    stop = threading.Event()

    def answer(throttled=False, retry_after=None):
        limiter.acquire("h", stop)
        limiter.release("h", throttled, retry_after)

    answer(throttled=True)
    answer(throttled=True)
    assert limiter.limit("h") == 2
    assert len(limiter) == 1  # idle but throttled: the host's state is kept
    answer(), answer()
    assert limiter.limit("h") == 3
    for _ in range(3 + 4 + 5 + 6 + 7):
        answer()
    assert limiter.limit("h") == 8 and len(limiter) == 0  # recovered and idle: forgotten
    # A Retry-After of an hour pauses the host for the cap, not the hour; other hosts never wait.
    answer(throttled=True, retry_after=3600)
    started = time.monotonic()
    limiter.acquire("other", stop)
    assert time.monotonic() - started < 0.1
    limiter.acquire("h", stop)
    assert 0.15 <= time.monotonic() - started < 1.0
    limiter.release("h")
    limiter.release("other")
    # Requests sent before a decrease that come back throttled do not halve it again: four in
    # flight answered 429 together halve once, as TCP halves once per window.
    wide = _HostLimiter(8)
    epochs = [wide.acquire("h", stop) for _ in range(4)]
    for epoch in epochs:
        wide.release("h", True, None, epoch=epoch)
    assert wide.limit("h") == 4


def test_then_runs_in_the_download_threads_and_a_failure_in_it_costs_one_item(http_server: HTTPTestServer):
    import threading

    from prx_data.ingest.http.download_session import DownloadSession

    for name in ("a", "b", "bad"):
        http_server.add_route(f"/{name}", name.encode())

    def then(result):
        if result.data == b"bad":
            raise ValueError("cannot work on this one")
        return result, threading.current_thread().name

    with DownloadSession(cfg(concurrency=2, per_host=2)) as session:
        out = dict(session.stream(((n, n, http_server.url(f"/{n}")) for n in ("a", "b", "bad")), then=then))
    assert {name for _, name in (out["a"], out["b"])} <= {f"prx-download_{i}" for i in range(2)}
    failed, _ = out["bad"]
    assert failed.status is Status.DOWNLOAD_FAILED and "ValueError" in failed.error and "cannot work on this one" in failed.error
