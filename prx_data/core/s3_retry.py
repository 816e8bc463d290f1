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

``storage_options`` may set ``max_attempts`` to change the attempts for every client alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

MAX_ATTEMPTS = 10


def max_attempts(options: Mapping[str, str] | None) -> int:
    value = (options or {}).get("max_attempts")
    return max(1, int(value)) if value else MAX_ATTEMPTS


def pyarrow_retry_strategy(options: Mapping[str, str] | None) -> pafs.S3RetryStrategy:
    return pafs.AwsStandardS3RetryStrategy(max_attempts=max_attempts(options))


def boto3_config(options: Mapping[str, str] | None = None, **config: Any) -> Any:
    """A botocore ``Config`` with the project's retries; ``config``: its other settings."""
    from botocore.config import Config

    return Config(retries={"mode": "adaptive", "max_attempts": max_attempts(options)}, **config)
