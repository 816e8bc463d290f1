"""How every S3 client of the project rides through throttling: the one retry configuration.

A busy bucket answers a share of requests with ``503 SlowDown`` (and resets some connections);
S3's guidance is to retry with exponential backoff. At the default three attempts of pyarrow and
boto3, 15 % throttling fails one request in 300, so a run of thousands of requests fails almost
surely; at ``MAX_ATTEMPTS`` (10) it is one in 10^8. Each client gets it here:

- pyarrow's ``S3FileSystem`` (``core.storage``: MDS shards, indexes, journals, listings):
  ``pyarrow_retry_strategy``, the AWS SDK's standard strategy (exponential backoff with jitter,
  retrying throttling, 5xx and connection errors);
- every boto3 client (the table lease in ``core.locking``, object listings in ``core.storage``,
  the training loader's downloads in ``compat.streaming_internals``): ``boto3_config``,
  botocore's adaptive mode (the standard retries plus a client-side rate limiter that slows
  down when throttled);
- streaming's own downloader: the loader binds its streams to ``ConfiguredS3Downloader``, which
  builds its client with ``boto3_config``.

Lance reaches object storage through its own client (Rust ``object_store``), which retries
throttling and 5xx with exponential backoff by itself (10 retries by default).

- whole-object reads of ``core.storage`` (``with_retries``): what the SDK reports as an internal
  failure when a throttled GET's body lands in the read buffer.

``storage_options`` may set ``max_attempts`` to change the attempts for every client alike.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pyarrow.fs as pafs

MAX_ATTEMPTS = 10
T = TypeVar("T")


def max_attempts(options: Mapping[str, str] | None) -> int:
    value = (options or {}).get("max_attempts")
    return max(1, int(value)) if value else MAX_ATTEMPTS


def pyarrow_retry_strategy(options: Mapping[str, str] | None) -> pafs.S3RetryStrategy:
    return pafs.AwsStandardS3RetryStrategy(max_attempts=max_attempts(options))


def boto3_config(options: Mapping[str, str] | None = None, **config: Any) -> Any:
    """A botocore ``Config`` with the project's retries; ``config``: its other settings."""
    from botocore.config import Config

    return Config(retries={"mode": "adaptive", "max_attempts": max_attempts(options)}, **config)


# pyarrow reads an object into a buffer sized for its bytes; the AWS SDK writes a throttled
# GET's error body into that buffer and reports a non-retryable INTERNAL_FAILURE ("Failed to
# flush response stream") instead of the 503. Whole reads are retried here for these.
_TRANSIENT = ("SLOW_DOWN", "SlowDown", "Failed to flush response stream", "HTTP status 503", "HTTP status 500", "SERVICE_UNAVAILABLE")


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and any(word in str(exc) for word in _TRANSIENT)


def with_retries(call: Callable[[], T], attempts: int = MAX_ATTEMPTS) -> T:
    """``call()``, again after an exponential, jittered wait while it fails transiently."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except OSError as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            time.sleep(min(5.0, 0.05 * 2**attempt) * (0.5 + random.random()))
    raise AssertionError("unreachable")
