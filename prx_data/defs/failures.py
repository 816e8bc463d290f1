"""Which step errors a retry can fix, and failing once, readably, on those it cannot.

Dagster 1.13's ``RetryPolicy`` has no retry-on predicate: a policy retries every exception except
a ``dg.Failure(allow_retries=False)``. So the asset bodies run inside :func:`fail_fast`, which
turns an error classified as permanent (a spec pointing at a missing table, a bad spec, a schema
or value error) into such a Failure, with the error's own message as the description and no
chained traceback (the summary then shows the message, not a retry stack with Rust paths), and
tags the run so the run-retry daemon does not re-launch it either. Transient errors (network,
object-store throttling and 5xx, lost Ray workers, Lance commit conflicts, lock waits) go through
untouched to the step ``RetryPolicy`` and then the run retries. A full disk, quota or read-only
filesystem, a refused Ray token, a missing bucket (``core.permanent_errors.permanent_cause``) is
permanent whatever wraps it, and the failure names it and what fixes it.

An error neither list knows is treated as transient: retrying an unknown failure twice costs a
few seconds, failing a run for a blip that would have passed costs a user's attention.
"""

from __future__ import annotations

import functools
import re
import traceback
from collections.abc import Callable, Iterator

import dagster as dg

from prx_data.core.locking import LeaseLost, TableLocked

# Two lists of causes no retry fixes: the full disk (core.retry) and a misconfigured cluster,
# object store or credentials, with the setting to fix (core.permanent_errors).
from prx_data.core.permanent_errors import permanent_cause
from prx_data.core.retry import Retryable, is_retryable_error
from prx_data.ingest.read.raw_item import SourceUnavailable

# Run tag read by Dagster's run-retry daemon (dagster._core.execution.retries): "false" on a run
# that failed on a permanent error, so dagster.yaml's run_retries do not re-launch it.
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
# Where the reason is recorded on the run, for the run list and the failure's metadata.
FAILURE_KIND_TAG = "prx/failure"

# Text of errors that pass on a retry, whatever their type (pyarrow / Lance / object stores raise
# OSError or RuntimeError with the cause only in the message).
TRANSIENT_MARKERS = (
    "commit conflict",
    "retryable",
    "slowdown",
    "slow down",
    "throttl",
    "too many requests",
    "503",
    "502",
    "500 internal",
    "504",
    "service unavailable",
    "timed out",
    "timeout",
    "connection reset",
    "connection refused",
    "connection aborted",
    "broken pipe",
    "temporarily unavailable",
    "could not be reached",
    "network",
)
# Ray's errors for a worker, node or object that went away (matched by name: ray is a lazy import).
TRANSIENT_TYPE_NAMES = frozenset(
    {
        "RayActorError",
        "ActorDiedError",
        "WorkerCrashedError",
        "NodeDiedError",
        "ObjectLostError",
        "OwnerDiedError",
        "ObjectReconstructionFailedError",
        "RaySystemError",
        "LocalRayError",
        "ActorUnavailableError",
        "OutOfMemoryError",
    }
)
# Configuration and data errors: the same input fails the same way next time.
PERMANENT_TYPES: tuple[type[BaseException], ...] = (
    SourceUnavailable,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ValueError,
    KeyError,
    TypeError,
    LookupError,
    NotImplementedError,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def is_transient(exc: BaseException) -> bool:
    """True when a retry of the step may succeed."""
    if isinstance(exc, dg.Failure):
        return exc.allow_retries
    if permanent_cause(exc) is not None:
        return False
    for link in _chain(exc):
        if isinstance(link, (Retryable, TableLocked, LeaseLost, ConnectionError, TimeoutError)) or is_retryable_error(link):
            return True
        if type(link).__name__ in TRANSIENT_TYPE_NAMES:
            return True
        if any(marker in str(link).lower() for marker in TRANSIENT_MARKERS):
            return True
    return not isinstance(exc, PERMANENT_TYPES)


# ", /home/runner/work/lance/lance/rust/lance/src/dataset/builder.rs:921:29": where in Lance's Rust
# source an error was raised, which Lance appends to its messages; it tells a user nothing.
_RUST_LOCATION = re.compile(r",?\s*\S+\.rs:\d+:\d+")


def readable_message(exc: BaseException) -> str:
    """The error's message without Rust source locations or the quotes KeyError adds; for a
    cause no retry fixes, that cause and the setting to fix, in one line."""
    cause = permanent_cause(exc)
    if cause is not None:
        return cause.line()
    message = _RUST_LOCATION.sub("", str(exc)).strip().strip('"').strip()
    return message or type(exc).__name__


def permanent_failure(exc: BaseException) -> dg.Failure:
    """A Failure that is not retried, whose description is the error's message (the message of
    the cause no retry fixes, e.g. a full disk, where a wrapper hides it)."""
    message = readable_message(exc)
    return dg.Failure(
        description=message,
        metadata={"error": type(exc).__name__, "retried": "no: a configuration or data error fails the same way again"},
        allow_retries=False,
    )


def fail_fast(fn: Callable) -> Callable:
    """Wrap an asset or check body: permanent errors fail the step once, transient ones propagate
    to the retry policy. Keeps ``fn``'s signature (Dagster reads parameters through ``__wrapped__``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except dg.Failure as exc:
            if not exc.allow_retries:
                _mark_run(args, exc.description or "")
            raise
        except Exception as exc:
            if is_transient(exc):
                raise
            context = _context(args, kwargs)
            if context is not None:
                # The full traceback stays in the run's debug logs for whoever needs it.
                context.log.debug("".join(traceback.format_exception(exc)))
            _mark_run(args, readable_message(exc))
            raise permanent_failure(exc) from None

    return wrapper


def _context(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, (dg.AssetExecutionContext, dg.OpExecutionContext)):
            return value
    return None


def _mark_run(args, reason: str) -> None:
    context = _context(args, {})
    if context is None:
        return
    try:
        context.instance.add_run_tags(context.run_id, {RETRY_ON_STEP_FAILURE_TAG: "false", FAILURE_KIND_TAG: "permanent"})
    except Exception as exc:  # noqa: BLE001 - a tag that could not be written must not hide the error
        context.log.warning(f"could not tag the run as not to be retried ({exc}); reason: {reason[:200]}")
