"""Fetch many URLs politely: bounded look-ahead, global and per-host limits, retries, size cap.

A :class:`DownloadSession` is a thread pool of ``config.concurrency`` threads and one
connection pool (``connection_pool.Pool``), kept for the life of a worker process (``shared_session``):
connections to a host are reused from one chunk and one unit to the next.
``DownloadSession.stream`` is a plain iterator pulled lazily, at most ``2 * concurrency`` items
ahead of what has been yielded, so millions of URLs stream through in flat memory, and a slow
URL holds only its own slot, never a batch. ``download_many`` is the one-call form.

Every item yields exactly one :class:`DownloadResult`; failures are values, never exceptions,
because one bad URL must not stop an ingest of millions.

Hostile URLs (see ``netguard``): every connection, redirects included, goes only to a public
address checked at connect time (``refused_address`` otherwise, unless the spec's
``download.allow_networks`` names it); each download has an overall deadline
(``download.deadline_s``) besides the per-read timeout; bodies are capped while streaming, a
compressed body included, so no more than the cap plus one network read is ever held.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import math
import queue
import re
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from prx_data.core.retry import Retryable, RetryPolicy, is_retryable_status
from prx_data.core.schema import Status
from prx_data.ingest.http import connection_pool, netguard
from prx_data.ingest.registry import DownloadConfig

__all__ = ["DownloadResult", "DownloadSession", "download_many", "download_one", "robots_opt_out", "shared_session"]

ALLOWED_SCHEMES = frozenset({"http", "https"})
MAX_REDIRECTS = 5
# A server asking for an hour's pause would otherwise park a worker thread for an hour.
DEFAULT_MAX_RETRY_AFTER_S = 30.0
# Backoff grows exponentially; without a ceiling retries=10 would sleep for many minutes.
MAX_BACKOFF_S = 60.0
OPT_OUT_DIRECTIVES = frozenset({"noai", "noimageai"})
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class DownloadResult:
    key: str
    url: str
    data: bytes | None
    status: Status
    error: str | None = None
    http_status: int | None = None
    content_type: str | None = None
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


class _Cancelled(Exception):
    """The consumer closed the iterator; abandon the item without a result."""


# -- per-host limit ------------------------------------------------------------------------------


class _HostLimiter:
    """At most ``limit`` concurrent holders per host, shrunk while the host says "slow down".

    A 429 or 503 halves the host's limit (never below one) and, with ``Retry-After``, pauses
    every new request to that host until then, not only the one retried: a throttled site sees
    the whole crawl back off, as it asked. Each ``limit`` answers without a throttle since the
    last change give one slot back, up to ``limit`` (additive increase, multiplicative decrease,
    as TCP does), so a site that throttled once is not crawled slowly for the rest of the run.

    Entries are dropped as soon as nobody holds or waits on a host and it is neither shrunk nor
    paused, so a crawl over millions of distinct hosts does not grow a dict of millions of
    entries; only hosts that throttled us and have not recovered stay (a few numbers each).
    """

    def __init__(self, limit: int, max_pause_s: float = DEFAULT_MAX_RETRY_AFTER_S) -> None:
        self._limit = limit
        self._max_pause_s = max_pause_s
        self._lock = threading.Lock()
        self._hosts: dict[str, _Host] = {}

    def acquire(self, host: str, stop: threading.Event) -> int:
        """Wait for a slot; returns the host's epoch, to hand back to ``release``."""
        with self._lock:
            entry = self._hosts.get(host)
            if entry is None:
                if len(self._hosts) >= MAX_REMEMBERED_HOSTS:
                    self._forget_idle()
                entry = self._hosts[host] = _Host(self._limit, threading.Condition(self._lock))
            entry.waiters += 1
            try:
                while True:
                    if stop.is_set():
                        raise _Cancelled
                    pause = entry.not_before - time.monotonic()
                    if pause <= 0 and entry.active < entry.limit:
                        break
                    # Timed wait so a closed iterator is noticed even if no slot frees up.
                    entry.cond.wait(min(0.1, pause) if pause > 0 else 0.1)
            except BaseException:
                entry.waiters -= 1
                self._drop_if_idle(host, entry)
                raise
            entry.waiters -= 1
            entry.active += 1
            return entry.epoch

    def release(
        self, host: str, throttled: bool = False, retry_after_s: float | None = None, answered: bool = True, epoch: int | None = None
    ) -> None:
        """``throttled``: the answer was 429 or 503 (with its ``Retry-After``, if any).
        ``answered``: False for a timeout or a failed connection, which neither grows nor
        shrinks the limit. ``epoch``: what ``acquire`` returned; throttles of requests sent
        before the last decrease do not halve again (64 requests in flight answered 429 at
        once halve the limit once, not down to one), as TCP halves once per window."""
        with self._lock:
            entry = self._hosts[host]
            entry.active -= 1
            if throttled and (epoch is None or epoch == entry.epoch):
                entry.limit = max(1, entry.limit // 2)
                entry.answers = 0
                entry.epoch += 1
            if throttled and retry_after_s:
                entry.not_before = max(entry.not_before, time.monotonic() + min(retry_after_s, self._max_pause_s))
            grown = 0
            if answered and not throttled and entry.limit < self._limit:
                entry.answers += 1
                if entry.answers >= entry.limit:
                    entry.limit += 1
                    entry.answers = 0
                    grown = 1
            if entry.waiters:
                entry.cond.notify(1 + grown)  # the freed slot, and the new one
            else:
                self._drop_if_idle(host, entry)

    def limit(self, host: str) -> int:
        """The host's current limit (``limit`` for a host never throttled)."""
        with self._lock:
            entry = self._hosts.get(host)
            return self._limit if entry is None else entry.limit

    def _forget_idle(self) -> None:
        # Only a crawl where a great many hosts throttled us gets here: forgetting an idle
        # host's throttle costs at most one more 429 from it.
        for host in [h for h, e in self._hosts.items() if not e.active and not e.waiters]:
            del self._hosts[host]

    def _drop_if_idle(self, host: str, entry: _Host) -> None:
        if not entry.active and not entry.waiters and entry.limit >= self._limit and entry.not_before <= time.monotonic():
            del self._hosts[host]

    def __len__(self) -> int:
        with self._lock:
            return len(self._hosts)


@dataclass
class _Host:
    limit: int
    cond: threading.Condition
    active: int = 0
    waiters: int = 0
    answers: int = 0  # answers without a throttle since the limit last changed
    not_before: float = 0.0  # monotonic time before which no request starts (Retry-After)
    epoch: int = 0  # decreases so far


# Answers that mean "too many requests from you": they shrink the host's limit. Other 5xx are
# retried but say nothing about our rate.
THROTTLE_STATUSES = frozenset({429, 503})
# Hosts whose throttle state is kept before idle ones are forgotten (a bound on memory).
MAX_REMEMBERED_HOSTS = 100_000


# -- header parsing ------------------------------------------------------------------------------

_ROBOTS_SPLIT = re.compile(r"[\s,;:]+")


def robots_opt_out(values: Iterable[str]) -> str | None:
    """The opt-out directive (``noai``/``noimageai``) named in X-Robots-Tag values, if any.

    Directives scoped to a user agent (``otherbot: noai``) count too: an opt-out from AI use
    addressed to any crawler is taken as the publisher's wish, not as a loophole for ours.
    Other directives (``none``, ``noindex``) are about search engines and are ignored.
    """
    for value in values:
        for token in _ROBOTS_SPLIT.split(value.lower()):
            if token in OPT_OUT_DIRECTIVES:
                return token
    return None


def _content_length(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _check_url(url: object) -> tuple[str | None, str | None]:
    """(host, None) for a fetchable URL, else (None, reason)."""
    if not isinstance(url, str) or not url.strip():
        return None, "URL is empty"
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError as exc:
        return None, f"invalid URL: {exc}"
    scheme = parts.scheme.lower()
    if not scheme:
        return None, "URL has no scheme"
    if scheme not in ALLOWED_SCHEMES:
        return None, f"scheme {scheme!r} not allowed"
    if not host:
        return None, "URL has no host"
    return host, None


def _attempts_suffix(attempts: int) -> str:
    return f" ({attempts} attempts)" if attempts > 1 else ""


# -- one download --------------------------------------------------------------------------------


class _Redirect(Exception):
    def __init__(self, location: str, http_status: int):
        super().__init__(location)
        self.location = location
        self.http_status = http_status


class _Downloader:
    def __init__(
        self,
        config: DownloadConfig,
        pool: connection_pool.Pool,
        max_retry_after_s: float,
    ) -> None:
        self.config = config
        self.pool = pool
        self.hosts = _HostLimiter(config.per_host, max_retry_after_s)
        self.policy = RetryPolicy(
            retries=config.retries,
            backoff_s=config.backoff_s,
            max_backoff_s=MAX_BACKOFF_S,
            max_retry_after_s=max_retry_after_s,
        )

    def fetch(self, key: str, url: str, stop: threading.Event) -> DownloadResult:
        host, reason = _check_url(url)
        if reason is not None:
            return DownloadResult(key, url, None, Status.DOWNLOAD_FAILED, reason)

        def failed(error: str, attempts: int, http_status: int | None = None) -> DownloadResult:
            return DownloadResult(key, url, None, Status.DOWNLOAD_FAILED, error, http_status, None, attempts)

        try:
            return self._fetch(key, url, url.strip(), host, failed, stop)
        finally:
            netguard.set_deadline(None)

    def _fetch(self, key, url, current, host, failed, stop) -> DownloadResult:
        def sleep(seconds: float) -> None:
            if seconds > 0 and stop.wait(seconds):
                raise _Cancelled

        redirects = 0
        attempt = 0
        # The deadline starts with the first request, not while queued behind a per-host slot.
        deadline = math.inf
        retrying = self.policy.retrying(deadline=lambda: deadline, sleep=sleep)
        try:
            for tried in retrying:
                with tried:
                    attempt = tried.retry_state.attempt_number
                    # Redirect hops belong to one attempt; a retry re-requests the current hop.
                    while True:
                        if stop.is_set():
                            raise _Cancelled
                        if time.monotonic() >= deadline:
                            return failed(f"deadline of {self.config.deadline_s}s exceeded", attempt)
                        try:
                            epoch = self.hosts.acquire(host, stop)
                            if deadline == math.inf:
                                deadline = time.monotonic() + self.config.deadline_s
                                netguard.set_deadline(deadline)
                            failure: Retryable | None = None
                            try:
                                return self._attempt(key, url, current, attempt, stop)
                            except Retryable as exc:
                                failure = exc
                                raise
                            finally:
                                throttled = failure is not None and failure.http_status in THROTTLE_STATUSES
                                self.hosts.release(
                                    host,
                                    throttled,
                                    failure.retry_after_s if throttled and failure else None,
                                    answered=failure is None or failure.http_status is not None,
                                    epoch=epoch,
                                )
                        except _Redirect as hop:
                            redirects += 1
                            if redirects > MAX_REDIRECTS:
                                return failed(f"more than {MAX_REDIRECTS} redirects", attempt, hop.http_status)
                            try:
                                nxt = urljoin(current, hop.location.strip())
                            except ValueError as exc:
                                return failed(f"bad redirect Location {hop.location!r}: {exc}", attempt)
                            # Each hop is re-checked: a redirect to file:// or ftp:// must not slip through.
                            next_host, reason = _check_url(nxt)
                            if reason is not None:
                                return failed(f"redirect to {nxt!r}: {reason}", attempt, hop.http_status)
                            current, host = nxt, next_host
        except Retryable as retry:
            if time.monotonic() >= deadline:
                return failed(f"deadline of {self.config.deadline_s}s exceeded ({retry.reason})", attempt, retry.http_status)
            if attempt > self.config.retries:
                return failed(retry.reason + _attempts_suffix(attempt), attempt, retry.http_status)
            return failed(
                f"{retry.reason}; no time left for a retry before the {self.config.deadline_s}s deadline", attempt, retry.http_status
            )
        except netguard.AddressRefused as refused:
            via = "" if current == url.strip() else f"redirect to {current!r}: "
            return DownloadResult(key, url, None, Status.REFUSED_ADDRESS, via + str(refused), None, None, attempt)
        except connection_pool.InvalidURL as exc:
            return failed(f"invalid URL: {exc}", attempt)
        except zlib.error as exc:
            return failed(f"could not decode body: {exc}", attempt)
        except ssl.SSLCertVerificationError as exc:
            # A certificate that does not verify will not verify on a retry either.
            return failed(f"TLS: {exc}", attempt)
        raise AssertionError("the retry loop ends with a result or an exception")

    def _attempt(self, key: str, url: str, current: str, attempt: int, stop: threading.Event) -> DownloadResult:
        """One request. Returns a final result or raises _Redirect / Retryable."""
        max_bytes = self.config.max_bytes
        try:
            with self.pool.get(current) as resp:
                code = resp.status
                ctype = resp.headers.get("content-type")

                def result(status: Status, data: bytes | None, error: str | None) -> DownloadResult:
                    return DownloadResult(key, url, data, status, error, code, ctype, attempt)

                if code in _REDIRECT_CODES:
                    location = resp.headers.get("location")
                    if not location:
                        return result(Status.DOWNLOAD_FAILED, None, f"HTTP {code} without Location")
                    raise _Redirect(location, code)
                if is_retryable_status(code):
                    raise Retryable.for_status(code, resp.headers.get("retry-after"))
                if not 200 <= code < 300:
                    return result(Status.DOWNLOAD_FAILED, None, f"HTTP {code}")

                directive = robots_opt_out(resp.headers.get_all("x-robots-tag") or ())
                if directive is not None:
                    return result(Status.OPTED_OUT, None, f"X-Robots-Tag: {directive}")

                length = _content_length(resp.headers.get("content-length"))
                if length is not None and length > max_bytes:
                    return result(
                        Status.TOO_LARGE,
                        None,
                        f"body larger than {max_bytes} bytes (Content-Length: {length})",
                    )

                encoding = (resp.headers.get("content-encoding") or "identity").strip().lower()
                if encoding in ("gzip", "x-gzip", "deflate"):
                    inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
                elif encoding == "identity":
                    inflate = None
                else:
                    return result(Status.DOWNLOAD_FAILED, None, f"unsupported Content-Encoding {encoding!r}")
                buf = bytearray()
                # Raw network reads, decompressed here with a bounded output: a small gzip body
                # cannot inflate past the cap inside one step. read1: one socket read per call,
                # so the deadline and ``stop`` are checked between reads.
                while chunk := resp.read1(_CHUNK):
                    if inflate is not None:
                        chunk = inflate.decompress(chunk, max_bytes + 1 - len(buf))
                        if inflate.unconsumed_tail:
                            return result(Status.TOO_LARGE, None, f"body larger than {max_bytes} bytes")
                    buf += chunk
                    if len(buf) > max_bytes:
                        return result(Status.TOO_LARGE, None, f"body larger than {max_bytes} bytes")
                    if stop.is_set():
                        raise _Cancelled
                if resp.length:
                    raise Retryable(f"connection error: the body ended {resp.length} bytes short of its Content-Length")
                if inflate is not None:
                    buf += inflate.flush()
                    if len(buf) > max_bytes:
                        return result(Status.TOO_LARGE, None, f"body larger than {max_bytes} bytes")
                return result(Status.OK, bytes(buf), None)
        except netguard.DeadlineExceeded:
            raise Retryable(f"deadline of {self.config.deadline_s}s exceeded") from None
        except TimeoutError:
            raise Retryable(f"timeout after {self.config.timeout_s}s") from None
        except ssl.SSLCertVerificationError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            # Refused, reset, unreachable, a TLS handshake cut, a malformed status line or header.
            raise Retryable(f"connection error: {exc or type(exc).__name__}") from None


# -- many downloads ------------------------------------------------------------------------------


class DownloadSession:
    """A long-lived thread pool and set of clients: connections stay open across calls.

    ``stream`` may be called many times (each unit of a source, each chunk) and from several
    threads at once; the per-host limit holds across all of them. ``close`` ends it.
    """

    def __init__(self, config: DownloadConfig, *, max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S) -> None:
        self.config = config
        self.connections = connection_pool.Pool(
            user_agent=config.user_agent,
            timeout_s=config.timeout_s,
            allow=netguard.parse_networks(config.allow_networks),
            max_idle=config.concurrency,
        )
        self._downloader = _Downloader(config, self.connections, max_retry_after_s)
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="prx-download")
        self._closed = False
        # Downloads started by ``start_early`` before anyone streamed them, by URL, each with
        # its own stop (``drop_early`` stops the ones nobody claimed, and no other).
        self._early: dict[str, tuple[Future, threading.Event]] = {}
        self._early_lock = threading.Lock()

    def __enter__(self) -> DownloadSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.drop_early()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.connections.close()

    def start_early(self, items: Iterable[tuple[str, str]], limit: int) -> int:
        """Start downloading the first ``limit`` distinct URLs of ``(key, url)`` now, before any
        ``stream`` asks for them; returns how many were started.

        For a caller that knows a source's first URLs before the code that ingests them has
        started (the CLI, while Dagster starts up). ``stream`` hands over such a download
        instead of fetching the URL again; one nobody claims is dropped when the session
        closes. The same per-host limits and guards apply; at most ``limit`` results wait here.
        """
        started = 0
        for key, url in items:
            if started >= limit or self._closed:
                break
            if _check_url(url)[1] is not None:
                continue
            with self._early_lock:
                if url in self._early:
                    continue
                stop = threading.Event()
                self._early[url] = (self._pool.submit(_guarded_fetch, self._downloader, key, url, stop), stop)
            started += 1
        return started

    def drop_early(self) -> None:
        """Stop and forget the early downloads nobody claimed (their command's runs are over):
        a request on the wire ends at its next read and none is retried, so they cannot hold
        the process's exit, which joins the download threads."""
        with self._early_lock:
            unclaimed, self._early = self._early, {}
        for _future, stop in unclaimed.values():
            stop.set()

    def _claim_early(self, url: str, then: Callable[[DownloadResult], Any] | None) -> Future | None:
        """The early download of ``url``, as a future of what ``then`` makes of it, or None."""
        with self._early_lock:
            found = self._early.pop(url, None) if self._early else None
        if found is None:
            return None
        early = found[0]
        claimed: Future = Future()

        def hand_over(done: Future) -> None:
            result = done.result()  # _guarded_fetch never raises
            with contextlib.suppress(InvalidStateError):  # the stream was closed meanwhile
                claimed.set_result(_then(then, result, time.monotonic()))

        early.add_done_callback(hand_over)
        return claimed

    def stream(
        self, items: Iterable[tuple[T, str, str | None]], then: Callable[[DownloadResult], Any] | None = None
    ) -> Generator[tuple[T, Any], None, None]:
        """``(tag, key, url)`` in, ``(tag, result)`` out as each download completes.

        A ``None`` URL is passed through at once with a ``None`` result, so a caller can send
        every item of a source through one stream (only the URL items are fetched) and has no
        barrier between chunks. At most ``2 * concurrency`` items are pulled ahead of what has
        been yielded. Closing the iterator stops pulling, drops its queued items and waits only
        for its requests already on the wire (bounded by ``timeout_s``).

        ``then``: work on each result in the download thread that fetched it; the stream yields
        what it returns. CPU work on the bytes (validating an image) then runs beside the
        downloads and the consumer instead of queueing on the consumer's one thread, which
        measured as the step's bottleneck. An exception in it costs only its item: it is
        called again with a failed result (no bytes) naming the exception, and must not raise
        on that.

        A URL whose download ``start_early`` began is not fetched again: that download is
        handed over (``then`` applied to it as to the others).
        """
        if self._closed:
            raise RuntimeError("download session is closed")
        window = 2 * self.config.concurrency
        stop = threading.Event()
        source = iter(items)
        downloader = self._downloader
        # Workers hand finished futures over a queue rather than the caller polling them with
        # concurrent.futures.wait, which costs O(window) per call and would dominate at high
        # concurrency over millions of items.
        finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
        in_flight: set[Future] = set()
        try:
            exhausted = False
            while True:
                while not exhausted and len(in_flight) < window:
                    try:
                        tag, key, url = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    if url is None:
                        yield tag, None
                        continue
                    future = self._claim_early(url, then)
                    if future is None:
                        # Rejected URLs never touch the pool, so a run of them cannot delay good ones.
                        if _check_url(url)[1] is not None:
                            result = downloader.fetch(key, url, stop)
                            yield tag, result if then is None else then(result)
                            continue
                        future = self._pool.submit(_guarded_fetch, downloader, key, url, stop, then)
                    future.tag = tag  # type: ignore[attr-defined]
                    in_flight.add(future)
                    future.add_done_callback(finished.put)
                if not in_flight:
                    return
                future = finished.get()
                in_flight.discard(future)
                yield future.tag, future.result()  # type: ignore[attr-defined]
        finally:
            stop.set()
            for future in in_flight:
                future.cancel()
            if in_flight:
                wait(in_flight)


T = TypeVar("T")

_SHARED: dict[str, DownloadSession] = {}
_SHARED_LOCK = threading.Lock()


def shared_session(config: DownloadConfig) -> DownloadSession:
    """This process's session for ``config``: one per worker process, reused by every unit it
    runs, so connections to a host stay open from one unit to the next."""
    key = config.model_dump_json()
    with _SHARED_LOCK:
        session = _SHARED.get(key)
        if session is None:
            if len(_SHARED) >= 8:  # specs rarely differ; do not keep idle pools for each one
                _SHARED.pop(next(iter(_SHARED))).close()
            if not _SHARED:
                atexit.register(_close_shared)
            session = _SHARED[key] = DownloadSession(config)
        return session


def drop_early_downloads() -> None:
    """``drop_early`` on every session of this process."""
    with _SHARED_LOCK:
        sessions = list(_SHARED.values())
    for session in sessions:
        session.drop_early()


def _close_shared() -> None:
    with _SHARED_LOCK:
        while _SHARED:
            _SHARED.popitem()[1].close()


def download_one(key: str, url: str, config: DownloadConfig | None = None) -> DownloadResult:
    """Convenience for a single URL (same rules as ``download_many``)."""
    return next(download_many([(key, url)], config or DownloadConfig()))


def download_many(
    items: Iterable[tuple[str, str]],
    config: DownloadConfig,
    *,
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
    session: DownloadSession | None = None,
) -> Generator[DownloadResult, None, None]:
    """Download ``(key, url)`` pairs, yielding one result per item as each completes.

    Order is not preserved. At most ``2 * config.concurrency`` items are pulled from ``items``
    ahead of the results already yielded. Closing the iterator early (``break``, ``.close()``)
    stops pulling input, drops queued items and waits only for requests already on the wire
    (bounded by ``config.timeout_s``). Without ``session``, a session is made for this call.
    """
    own = session is None
    active = DownloadSession(config, max_retry_after_s=max_retry_after_s) if session is None else session
    try:
        for _, result in active.stream((None, key, url) for key, url in items):
            assert result is not None, "stream answers every item that has a URL with a result"
            yield result
    finally:
        if own:
            active.close()


def _guarded_fetch(downloader: _Downloader, key: str, url: str, stop: threading.Event, then=None):
    started = time.monotonic()
    try:
        result = downloader.fetch(key, url, stop)
    except _Cancelled:
        # Only reachable after the consumer has gone; nobody will read this.
        return DownloadResult(key, url, None, Status.DOWNLOAD_FAILED, "cancelled")
    except Exception as exc:  # noqa: BLE001
        # A bug or an odd response must cost one item, not the whole ingest.
        failed = _unexpected(key, url, exc, started)
        return failed if then is None else then(failed)
    return _then(then, result, started)


def _then(then, result: DownloadResult, started: float):
    """``then(result)``; an exception in it costs its item only: ``then`` gets the failure
    instead, which carries no bytes to trip on again."""
    if then is None:
        return result
    try:
        return then(result)
    except Exception as exc:  # noqa: BLE001
        return then(_unexpected(result.key, result.url, exc, started, result.http_status))


def _unexpected(key: str, url: str, exc: Exception, started: float, http_status: int | None = None) -> DownloadResult:
    elapsed = time.monotonic() - started
    return DownloadResult(
        key, url, None, Status.DOWNLOAD_FAILED, f"unexpected {type(exc).__name__} after {elapsed:.1f}s: {exc}", http_status
    )
