"""One retry policy for every HTTP client here: URL downloads and model servers.

What is retried: timeouts, connection failures, a connection the server dropped mid-answer,
and HTTP 408, 429 and 5xx (an overloaded or restarting server recovers). Everything else is an
answer and is returned at once. Waits grow exponentially with jitter (workers that failed
together must not retry in lockstep), a server's ``Retry-After`` (delta-seconds or HTTP-date)
lengthens the wait up to a cap (a server asking for an hour must not park a worker for an
hour), and no wait runs past the caller's deadline: a retry that cannot start before it is
not attempted.

The loop is tenacity's; this module only fixes the policy, so callers keep their own control
flow (redirects, per-host slots, cancellation) inside one attempt.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import tenacity

if TYPE_CHECKING:
    # httpx (and the rich and pygments it imports) loads where requests are made, not in every
    # process that imports a config naming this policy.
    import httpx

__all__ = [
    "RetryPolicy",
    "Retryable",
    "is_retryable_error",
    "is_retryable_status",
    "retry_after_s",
]

_RETRYABLE_4XX = frozenset({408, 429})


def is_retryable_status(code: int) -> bool:
    return code in _RETRYABLE_4XX or 500 <= code <= 599


def is_retryable_error(exc: BaseException) -> bool:
    """Transport failures that may pass; a bad URL or protocol never will."""
    import httpx

    return isinstance(exc, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError))


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (RFC 9110: delta-seconds or an HTTP-date), or
    None when absent or unreadable. A date in the past means "now" (0)."""
    if not value or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 850 / asctime forms carry no zone: they are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class Retryable(Exception):
    """One attempt failed in a way worth another (raised inside an attempt)."""

    def __init__(self, reason: str, *, http_status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.http_status = http_status
        self.retry_after_s = retry_after_s

    @classmethod
    def from_response(cls, response: httpx.Response, reason: str | None = None) -> Retryable:
        return cls.for_status(response.status_code, response.headers.get("retry-after"), reason)

    @classmethod
    def for_status(cls, status: int, retry_after: str | None, reason: str | None = None) -> Retryable:
        """An answer with a retryable ``status`` and its ``Retry-After`` header value."""
        return cls(reason or f"HTTP {status}", http_status=status, retry_after_s=retry_after_s(retry_after))


class _StopPastDeadline(tenacity.stop.stop_base):
    """Stops when the next wait would end past the deadline (a monotonic time)."""

    def __init__(self, deadline_at: Callable[[], float]) -> None:
        self.deadline_at = deadline_at

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return time.monotonic() + (retry_state.upcoming_sleep or 0.0) >= self.deadline_at()


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more attempts after the first; the n-th wait is drawn from
    [b/2, b] with b = min(``max_backoff_s``, ``backoff_s`` * 2**(n-1)), and is at least the
    server's Retry-After capped at ``max_retry_after_s``."""

    retries: int
    backoff_s: float = 0.5
    max_backoff_s: float = 60.0
    max_retry_after_s: float = 30.0

    def wait_s(self, attempt: int, retry_after: float | None = None, rng: Callable[[float, float], float] = random.uniform) -> float:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
        delay = rng(base / 2, base)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after_s))
        return delay

    def retrying(
        self,
        *,
        deadline: Callable[[], float] | float = math.inf,
        sleep: Callable[[float], None] = time.sleep,
    ) -> tenacity.Retrying:
        """A tenacity loop for this policy: ``for attempt in policy.retrying(): with attempt: ...``.

        Only :class:`Retryable` is retried; anything else ends the loop at once. When the loop
        gives up, the last :class:`Retryable` is re-raised. ``deadline`` is a monotonic time (or
        a function returning one, for deadlines that start with the first request): no wait
        runs past it. ``sleep`` may raise to cancel.
        """
        deadline_at = deadline if callable(deadline) else (lambda: deadline)

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            return self.wait_s(state.attempt_number, getattr(exc, "retry_after_s", None))

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1) | _StopPastDeadline(deadline_at),
            wait=wait,
            retry=tenacity.retry_if_exception_type(Retryable),
            sleep=sleep,
            reraise=True,
        )
