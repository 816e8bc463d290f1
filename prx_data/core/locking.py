"""One writer per source table, whoever starts it (CLI, Dagster UI, daemon, a script).

The guard is a lock object beside the table, ``<root>/sources/<source>.lock`` for the table
``<root>/sources/<source>.lance``, taken by every stage that writes a source's tables (ingest,
the column stages, the export). It lives in the storage root, not in an orchestrator, so two
processes that share nothing but the data root still exclude each other.

- Local disks: ``flock`` on the lock file (through filelock). The kernel drops it when the holder dies, so a
  killed run never blocks the next one. The file holds the owner (host, pid, run) for messages.
- ``s3://``: a lease object created with a conditional PUT (``If-None-Match: *``): exactly one
  creator wins. The holder renews it every ``ttl/3`` seconds with ``If-Match: <its ETag>``; a
  lease not renewed for ``ttl`` seconds (judged by the store's own clock: its ``Date`` header
  against the object's ``Last-Modified``) may be taken over, again with ``If-Match`` on the
  stale ETag, so of two contenders only one succeeds. Release is a conditional DELETE. AWS S3
  and moto (>= 5.0) honour these headers; pyarrow's S3 filesystem cannot send them, so this
  uses boto3 (already installed with mosaicml-streaming).
- ``gs://``: not supported yet; a warning is logged and the run proceeds unguarded.

A second writer waits (polling) up to ``wait_s`` seconds, then raises ``TableLocked`` naming
the holder. Within one process the lock is re-entrant per thread, so a stage that calls another
locked function does not deadlock on itself.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlparse

import filelock

from prx_data.core.paths import lock_uri
from prx_data.core.s3_retry import boto3_config
from prx_data.core.storage import is_remote, s3_credentials

logger = logging.getLogger(__name__)

POLL_S = 0.2


class TableLocked(RuntimeError):
    """Another run holds the table's lock and did not release it in time."""


class LeaseLost(RuntimeError):
    """This run's lease expired and another run took it: stop before committing anything."""


def _owner(purpose: str) -> dict[str, Any]:
    return {
        "owner": uuid.uuid4().hex,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "run": os.environ.get("DAGSTER_RUN_ID", ""),
        "purpose": purpose,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _describe(raw: bytes | None) -> str:
    try:
        info = json.loads(raw or b"{}")
    except ValueError:
        return "an unknown holder"
    run = f", Dagster run {info['run']}" if info.get("run") else ""
    return f"{info.get('purpose') or 'a run'} (host {info.get('host')}, pid {info.get('pid')}{run}, since {info.get('since')})"


# Local -----------------------------------------------------------------------------------------
class LocalFileLocked(RuntimeError):
    """A local lock file is held by another process (or another lock object of this one)."""


def _flock(path: str, on_acquired: Callable[[int], None] | None = None) -> filelock.UnixFileLock:
    """An exclusive ``flock`` on a local file, through filelock.

    The kernel drops it when the holder dies, so a killed run never blocks the next one; no soft
    (marker-file) fallback, which a dead holder would leave behind. The file stays after release:
    removing it would race with a waiter that opened it already. filelock never truncates an
    existing file, so the holder's note in it stays readable to waiters.
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return filelock.UnixFileLock(path, thread_local=False, preserve_lock_file=True, fallback_to_soft=False, on_acquired=on_acquired)


class _LocalLock:
    def __init__(self, path: str, purpose: str) -> None:
        self.path = path
        self.purpose = purpose
        self.lock: filelock.UnixFileLock | None = None

    def _holder(self) -> str:
        try:
            with open(self.path, "rb") as handle:
                return _describe(handle.read())
        except OSError:
            return _describe(None)

    def _write_owner(self, fd: int) -> None:
        note = json.dumps(_owner(self.purpose)).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)

    def acquire(self, wait_s: float) -> None:
        lock = _flock(self.path, on_acquired=self._write_owner)
        deadline = time.monotonic() + wait_s
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            logger.warning("waiting for %s, held by %s", self.path, self._holder())
            try:
                lock.acquire(timeout=max(0.0, deadline - time.monotonic()), poll_interval=POLL_S)
            except filelock.Timeout:
                raise TableLocked(
                    f"{self.path} is held by {self._holder()}; waited {wait_s:.0f}s. One writer per source "
                    "table: let that run finish (or stop it), then run again"
                ) from None
        self.lock = lock

    def check(self) -> None:
        return None  # flock cannot be lost while the process lives

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


# S3 --------------------------------------------------------------------------------------------
def _s3_client(options: dict | None):
    import boto3

    config = boto3_config(options, connect_timeout=5, read_timeout=30)
    return boto3.client("s3", config=config, **s3_credentials(options).boto3_kwargs())


def _code(error) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


class _S3Lease:
    def __init__(self, uri: str, options: dict | None, purpose: str, ttl_s: float) -> None:
        parsed = urlparse(uri)
        self.uri = uri
        self.bucket = parsed.netloc
        self.key = parsed.path.lstrip("/")
        self.client = _s3_client(options)
        self.purpose = purpose
        self.ttl_s = ttl_s
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._body = json.dumps({**_owner(purpose), "ttl_s": ttl_s}).encode()

    def _put(self, **condition: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            return self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body, **condition)["ETag"]
        except ClientError as error:
            if _code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return None
            raise

    def _stale_etag(self) -> tuple[str | None, bytes | None]:
        """(ETag of the current lease if it expired, its bytes); ETag None while it is live."""
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as error:
            if _code(error) in ("NoSuchKey", "404"):
                return "", None  # released meanwhile: create again
            raise
        raw = response["Body"].read()
        try:
            ttl = float(json.loads(raw).get("ttl_s", self.ttl_s))
        except (ValueError, AttributeError):
            ttl = self.ttl_s
        now = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
        age = (now - response["LastModified"]).total_seconds()
        return (response["ETag"] if age > ttl else None), raw

    def acquire(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        logged = False
        while True:
            etag = self._put(IfNoneMatch="*")
            if etag is None:
                stale, raw = self._stale_etag()
                if stale == "":
                    continue
                if stale:
                    logger.warning("taking over the expired lease %s of %s", self.uri, _describe(raw))
                    etag = self._put(IfMatch=stale)
            if etag is not None:
                self.etag = etag
                break
            if time.monotonic() >= deadline:
                raise TableLocked(
                    f"{self.uri} is held by {_describe(raw)}; waited {wait_s:.0f}s. One writer per source "
                    f"table: let that run finish (a killed run's lease expires {self.ttl_s:.0f}s after its last renewal)"
                )
            if not logged:
                logger.warning("waiting for %s, held by %s", self.uri, _describe(raw))
                logged = True
            time.sleep(POLL_S)
        self._thread = threading.Thread(target=self._renew, name=f"lease {self.key}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            held = self.etag
            if held is None:  # released meanwhile: nothing left to renew
                return
            try:
                etag = self._put(IfMatch=held)
            except Exception:  # noqa: BLE001 - a blip: the next renewal retries well before expiry
                logger.warning("could not renew the lease %s", self.uri, exc_info=True)
                continue
            if etag is None:
                logger.error("lost the lease %s to another run", self.uri)
                self.lost = True
                return
            self.etag = etag

    def check(self) -> None:
        if self.lost:
            raise LeaseLost(f"the lease {self.uri} expired and another run took it; nothing was committed by this run")

    def release(self) -> None:
        from botocore.exceptions import ClientError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost or self.etag is None:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except ClientError as error:
            if _code(error) not in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                raise


# Public ----------------------------------------------------------------------------------------
class _Held:
    def __init__(self, backend) -> None:
        self.backend = backend
        self.depth = 0
        self.thread = threading.get_ident()


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


@dataclass(frozen=True)
class LockPolicy:
    wait_s: float = 1800.0  # how long a second writer waits for the lock
    ttl_s: float = 60.0  # how long an object-store lease lives without renewal (a killed run's)


_policy = LockPolicy()


def configure(policy: LockPolicy) -> None:
    """Set by the entry point from its settings (the code location's ``StorageResource``, the
    CLI): every table writer takes its lock through ``locks_table``/``table_lock``, deep below
    signatures that have no reason to carry lock timings."""
    global _policy
    _policy = policy


def _defaults(wait_s: float | None, ttl_s: float | None) -> tuple[float, float]:
    return (_policy.wait_s if wait_s is None else wait_s, _policy.ttl_s if ttl_s is None else ttl_s)


@contextlib.contextmanager
def table_lock(
    table_uri: str,
    storage_options: dict | None = None,
    *,
    purpose: str = "",
    wait_s: float | None = None,
    ttl_s: float | None = None,
) -> Iterator[Callable[[], None]]:
    """Hold the source table's lock; yields ``check()``, which raises ``LeaseLost`` if a remote
    lease was lost (call it before a commit point)."""
    uri = lock_uri(table_uri)
    with _held_guard:
        held = _held.get(uri)
    if held is not None and held.thread == threading.get_ident():
        held.depth += 1
        try:
            yield held.backend.check
        finally:
            held.depth -= 1
        return
    wait_s, ttl_s = _defaults(wait_s, ttl_s)
    purpose = purpose or f"a writer of {table_uri}"
    backend: _LocalLock | _S3Lease
    if not is_remote(uri):
        backend = _LocalLock(uri.removeprefix("file://"), purpose)
    elif uri.startswith("s3://"):
        backend = _S3Lease(uri, storage_options, purpose, ttl_s)
    else:
        logger.warning("no table lock on %s (only local and s3:// roots have one): run one writer at a time", uri)
        yield lambda: None
        return
    # Threads of one process queue here first, so only one of them polls the store.
    started = time.monotonic()
    while True:
        with _held_guard:
            if uri not in _held:
                _held[uri] = _Held(backend)
                break
        if time.monotonic() - started > wait_s:
            raise TableLocked(f"{uri} is held by another thread of this process ({os.getpid()})")
        time.sleep(POLL_S)
    try:
        backend.acquire(max(0.0, wait_s - (time.monotonic() - started)))
    except BaseException:
        with _held_guard:
            _held.pop(uri, None)
        raise
    try:
        _held[uri].depth = 1
        yield backend.check
    finally:
        try:
            backend.release()
        finally:
            with _held_guard:
                _held.pop(uri, None)


def locks_table(argument: str = "table_uri", options_argument: str = "storage_options") -> Callable:
    """Decorator: run the function while holding the lock of the table named by ``argument``."""

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs)
            uri = bound.arguments[argument]
            options = bound.arguments.get(options_argument)
            with table_lock(uri, options, purpose=f"{fn.__module__}.{fn.__name__}"):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


@contextlib.contextmanager
def local_file_lock(path: str, wait_s: float | None = None, busy: str | None = None) -> Iterator[None]:
    """An exclusive flock on a local file for the block (e.g. Dagster's SQLite home while it is
    first created). ``wait_s=None`` waits as long as it takes; otherwise ``LocalFileLocked``
    (message ``busy``) after ``wait_s`` seconds (0: do not wait)."""
    lock = _flock(path)
    try:
        lock.acquire(timeout=-1 if wait_s is None else wait_s, poll_interval=POLL_S)
    except filelock.Timeout:
        raise LocalFileLocked(busy or f"{path} is held by another process") from None
    try:
        yield
    finally:
        lock.release()


def dagster_home_lock(home: str | None = None):
    """Held while a Dagster home is set up and first opened: two runs starting at once on a new
    root would otherwise both create its SQLite storages (``UNIQUE constraint failed:
    alembic_version``) and its partitions."""
    home = home or os.environ.get("DAGSTER_HOME")
    if not home:
        return contextlib.nullcontext()
    return local_file_lock(os.path.join(home, ".prx-startup.lock"))


__all__ = [
    "LeaseLost",
    "LockPolicy",
    "TableLocked",
    "configure",
    "dagster_home_lock",
    "local_file_lock",
    "lock_uri",
    "locks_table",
    "table_lock",
]
