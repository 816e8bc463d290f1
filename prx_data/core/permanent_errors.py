"""Errors a retry cannot fix, with the cause in one line and the setting that fixes it.

One plain function, :func:`permanent_cause`, decides; the Dagster wiring (``defs/failures.py``)
fails a step once on what it returns, and the run summary prints its line. What is permanent:

- the Ray cluster refused the driver's token (``InvalidAuthToken``), or no token was sent to a
  cluster with token auth on;
- the Ray address is not a Ray cluster (nothing that speaks Ray's protocol answers there
  within the probe's bounded wait);
- no live node offers the custom resources ``PRX_RAY_TASK_RESOURCES`` asks for, after a
  bounded wait (``PRX_RAY_RESOURCE_WAIT_S``);
- an object-store bucket that does not exist, or credentials the store rejects or that are
  missing;
- a full disk or quota, or a read-only filesystem (by the error's number, or its text where a
  library kept only that: pyarrow's writes, Lance's Rust errors, a Ray task's): retrying a write
  to a full disk only fills it again and hides the cause.

Matched on the error's type (:class:`PermanentError`) or its text: Ray, pyarrow, Lance and the
S3 clients raise their own types with the cause only in the message.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PermanentCause", "PermanentError", "permanent_cause"]

RAY_TOKEN_SETTINGS = "RAY_AUTH_MODE=token with RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN) holding the cluster's token"
CREDENTIAL_SETTINGS = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and PRX_S3_ENDPOINT for a non-AWS store)"
ROOT_SETTINGS = "PRX_LANCE_ROOT / PRX_MDS_ROOT (or the source's location)"


@dataclass(frozen=True)
class PermanentCause:
    cause: str
    setting: str  # the setting that fixes it; empty where the fix is not a setting
    remedy: str = ""  # what fixes it, where that is not a setting

    def line(self) -> str:
        fix = f"set {self.setting}" if self.setting else self.remedy
        return f"{self.cause} ({fix}; not retried)"


class PermanentError(RuntimeError):
    """Raised where a permanent cause is found first-hand (the Ray probe, the resource wait)."""

    def __init__(self, cause: str, setting: str) -> None:
        self.permanent = PermanentCause(cause, setting)
        super().__init__(self.permanent.line())


# (text in the error, lower case) -> the cause it means and the setting to fix.
_MARKERS: tuple[tuple[tuple[str, ...], PermanentCause], ...] = (
    (
        ("invalidauthtoken", "authentication token is missing or incorrect", "unauthenticated"),
        PermanentCause("the Ray cluster refused the driver's token (InvalidAuthToken)", RAY_TOKEN_SETTINGS),
    ),
    (
        ("nosuchbucket", "no_such_bucket", "bucket does not exist", "the specified bucket does not exist"),
        PermanentCause("the object-store bucket does not exist", ROOT_SETTINGS),
    ),
    (
        (
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "access key id you provided does not exist",
            "unable to locate credentials",
            "no credentials",
            "invalid_access_key_id",
        ),
        PermanentCause("the object store rejected the credentials, or none were given", CREDENTIAL_SETTINGS),
    ),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        cause = getattr(link, "cause", None)  # Ray's RayTaskError keeps the task's own error here
        link = link.__cause__ or link.__context__ or (cause if isinstance(cause, BaseException) else None)


_FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
_FULL_DISK_MARKERS = (
    "no space left on device",
    "disk quota exceeded",
    "read-only file system",
    "(os error 28)",
    "(os error 122)",
    "(os error 30)",
)
_FULL_DISK_REMEDY = "free space on that filesystem, or make it writable, and run again"


def _full_disk(link: BaseException) -> bool:
    if isinstance(link, OSError) and link.errno in _FULL_DISK_ERRNOS:
        return True
    return any(marker in str(link).lower() for marker in _FULL_DISK_MARKERS)


def permanent_cause(exc: BaseException) -> PermanentCause | None:
    """What no retry fixes in ``exc`` (or what it was raised from), or None. A full disk is
    named by the error that says so (its file included), whatever wraps it."""
    for link in _chain(exc):
        if isinstance(link, PermanentError):
            return link.permanent
    for link in _chain(exc):
        if _full_disk(link):
            return PermanentCause(str(link), "", _FULL_DISK_REMEDY)
    for link in _chain(exc):
        text = str(link).lower()
        for markers, cause in _MARKERS:
            if any(marker in text for marker in markers):
                return cause
    return None
