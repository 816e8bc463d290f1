"""The shared retry policy: what retries, Retry-After in both forms, caps and deadlines."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from prx_data.core.retry import Retryable, RetryPolicy, is_retryable_error, is_retryable_status, retry_after_s

NOW = datetime(2026, 11, 3, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value,want",
    [
        ("120", 120.0),
        ("  7 ", 7.0),
        ("0", 0.0),
        ("-5", 0.0),
        ("1.5", 1.5),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),  # IMF-fixdate
        ("Tuesday, 03-Nov-26 12:00:30 GMT", 30.0),  # obsolete RFC 850 form
        ("Tue Nov  3 12:01:00 2026", 60.0),  # asctime form, no zone: GMT
        (format_datetime(NOW - timedelta(hours=1), usegmt=True), 0.0),  # already past
        ("", None),
        (None, None),
        ("soon", None),
        ("inf", None),
    ],
)
def test_retry_after_reads_delta_seconds_and_http_dates(value, want) -> None:
    assert retry_after_s(value, now=NOW) == want


@pytest.mark.parametrize(
    "code,want",
    [
        (408, True),
        (429, True),
        (500, True),
        (503, True),
        (599, True),
        (200, False),
        (301, False),
        (400, False),
        (401, False),
        (404, False),
        (418, False),
    ],
)
def test_which_statuses_retry(code, want) -> None:
    assert is_retryable_status(code) is want


def test_which_transport_errors_retry() -> None:
    request = httpx.Request("GET", "http://example.invalid/")
    assert is_retryable_error(httpx.ConnectError("refused", request=request))
    assert is_retryable_error(httpx.ReadTimeout("slow", request=request))
    assert is_retryable_error(httpx.RemoteProtocolError("dropped", request=request))
    assert not is_retryable_error(httpx.UnsupportedProtocol("ftp", request=request))
    assert not is_retryable_error(httpx.InvalidURL("bad"))
    assert not is_retryable_error(ValueError("bug"))


def test_waits_grow_with_jitter_up_to_the_backoff_cap() -> None:
    policy = RetryPolicy(retries=10, backoff_s=1.0, max_backoff_s=5.0)
    low, high = (lambda a, b: a), (lambda a, b: b)
    assert [policy.wait_s(n, rng=high) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert [policy.wait_s(n, rng=low) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert all(0.5 <= policy.wait_s(1) <= 1.0 for _ in range(50))


def test_retry_after_lengthens_the_wait_but_only_up_to_its_cap() -> None:
    policy = RetryPolicy(retries=3, backoff_s=0.1, max_backoff_s=1.0, max_retry_after_s=30.0)
    assert policy.wait_s(1, retry_after=12.0) == 12.0
    assert policy.wait_s(1, retry_after=3600.0) == 30.0
    assert policy.wait_s(1, retry_after=0.0) <= 0.1  # a shorter ask never shortens the backoff


def _run(policy: RetryPolicy, outcomes: list, **kwargs) -> tuple[object, list[float], int]:
    slept: list[float] = []
    calls = 0

    def attempt_once():
        nonlocal calls
        calls += 1
        out = outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out

    def run():
        for attempt in policy.retrying(sleep=slept.append, **kwargs):
            with attempt:
                return attempt_once()

    try:
        return run(), slept, calls
    except BaseException as exc:  # noqa: BLE001
        return exc, slept, calls


def test_retries_then_succeeds_and_honours_each_retry_after() -> None:
    policy = RetryPolicy(retries=3, backoff_s=0.01, max_backoff_s=0.01, max_retry_after_s=10.0)
    result, slept, calls = _run(policy, [Retryable("HTTP 503", retry_after_s=4.0), Retryable("HTTP 429", retry_after_s=2.0), "ok"])
    assert result == "ok" and calls == 3 and slept == [4.0, 2.0]


def test_gives_up_after_the_retries_with_the_last_error() -> None:
    policy = RetryPolicy(retries=2, backoff_s=0.0)
    result, slept, calls = _run(policy, [Retryable("a"), Retryable("b"), Retryable("c"), "never"])
    assert isinstance(result, Retryable) and result.reason == "c" and calls == 3 and len(slept) == 2


def test_other_errors_are_not_retried() -> None:
    result, slept, calls = _run(RetryPolicy(retries=5), [KeyError("bug"), "never"])
    assert isinstance(result, KeyError) and calls == 1 and slept == []


def test_no_wait_runs_past_the_deadline() -> None:
    policy = RetryPolicy(retries=5, backoff_s=0.01, max_retry_after_s=60.0)
    deadline = time.monotonic() + 5.0
    # The server asks for 30 s, the deadline leaves 5: give up now rather than sleep past it.
    result, slept, calls = _run(policy, [Retryable("HTTP 429", retry_after_s=30.0), "never"], deadline=deadline)
    assert isinstance(result, Retryable) and calls == 1 and slept == []
    # A deadline given as a function is read when the wait is decided (it may start later).
    moving = {"at": float("inf")}
    result, slept, calls = _run(policy, [Retryable("x", retry_after_s=1.0), "ok"], deadline=lambda: moving["at"])
    assert result == "ok" and slept == [1.0]


def test_a_sleep_that_raises_cancels_the_loop() -> None:
    class Cancelled(Exception):
        pass

    def sleep(_seconds: float) -> None:
        raise Cancelled

    def run():
        for attempt in RetryPolicy(retries=3).retrying(sleep=sleep):
            with attempt:
                raise Retryable("HTTP 500")

    with pytest.raises(Cancelled):
        run()


def test_retryable_from_response_reads_status_and_retry_after() -> None:
    response = httpx.Response(503, headers={"Retry-After": "Tue, 03 Nov 2099 12:00:00 GMT"})
    exc = Retryable.from_response(response)
    assert exc.retry_after_s is not None
    assert exc.http_status == 503 and exc.reason == "HTTP 503" and exc.retry_after_s > 1e9
