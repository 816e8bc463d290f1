"""Every value a request can carry, checked before it reaches Lance or the file system.

Request strings end up in two dangerous places: Lance filter expressions (SQL) and file paths.
Values are matched against a closed pattern or a known set first; the few that must enter a
filter as text (the search words) are quoted and LIKE-escaped here, in one place.
"""

from __future__ import annotations

import os
import re
import unicodedata

from prx_data.core.schema import Status
from prx_data.core.storage import join, local_path

SAMPLE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
BUCKET_RE = re.compile(r"^[0-9]{1,5}x[0-9]{1,5}$")
LABEL_RE = re.compile(r"^[a-z0-9_\-]{1,32}$")
TIER_RE = re.compile(r"^[0-9]{1,5}$")
MAX_QUERY_CHARS = 200
STATUSES = tuple(s.value for s in Status)
LIKE_ESCAPE = "\\"


class BadRequest(ValueError):
    """A request value that fails its check (answered with 400)."""


class NotFound(LookupError):
    """A well-formed request for something that is not there (answered with 404)."""


def sample_id(value: str) -> str:
    if not isinstance(value, str) or not SAMPLE_ID_RE.fullmatch(value):
        raise BadRequest("a sample id is 32 lowercase hex digits")
    return value


def source(value: str, known: frozenset[str] | set[str]) -> str:
    """The known name itself is returned, never the request's string: only names listed from
    the data root can reach a path."""
    for name in known:
        if name == value:
            return name
    raise NotFound(f"no source table named {value[:64]!r}")


def optional_choice(value: str | None, allowed: tuple[str, ...], what: str) -> str | None:
    if value in (None, ""):
        return None
    if value not in allowed:
        raise BadRequest(f"unknown {what} {value[:64]!r}")
    return value


def status(value: str | None) -> str | None:
    return optional_choice(value, STATUSES, "status")


def label(value: str | None) -> str | None:
    # Labels are open-ended (a classifier may add one), so a pattern rather than a set.
    if value in (None, ""):
        return None
    if not LABEL_RE.fullmatch(value):
        raise BadRequest("a label is 1-32 of a-z, 0-9, '_' or '-'")
    return value


def tier(value: str | None) -> int | None:
    if value in (None, ""):
        return None
    if not TIER_RE.fullmatch(value):
        raise BadRequest("a tier is a whole number of pixels per side")
    return int(value)


def bucket(value: str | None) -> str | None:
    if value in (None, ""):
        return None
    if not BUCKET_RE.fullmatch(value):
        raise BadRequest("a bucket is '<height>x<width>'")
    return value


def skipped(value: str | None) -> bool | None:
    if value in (None, "", "any"):
        return None
    if value in ("yes", "no"):
        return value == "yes"
    raise BadRequest("skipped is 'yes', 'no' or 'any'")


def page(value: str | None) -> int:
    if value in (None, ""):
        return 1
    if not value.isdigit() or not 1 <= int(value) <= 10_000:
        raise BadRequest("page is a number from 1 to 10000")
    return int(value)


def query(value: str | None) -> str:
    """Search words: printable text, at most MAX_QUERY_CHARS."""
    if not value:
        return ""
    text = value.strip()
    if len(text) > MAX_QUERY_CHARS:
        raise BadRequest(f"search text is limited to {MAX_QUERY_CHARS} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in text):
        raise BadRequest("search text has control characters")
    return text


# Lance filter expressions ---------------------------------------------------------------------
from prx_data.core.filters import sql_string  # noqa: E402,F401  (re-exported for the explorer)


def like_contains(column: str, text: str) -> str:
    """``column`` contains ``text`` (case-insensitive), with LIKE's wildcards taken literally."""
    escaped = text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2).replace("%", LIKE_ESCAPE + "%").replace("_", LIKE_ESCAPE + "_")
    return f"{column} ILIKE {sql_string('%' + escaped + '%')} ESCAPE {sql_string(LIKE_ESCAPE)}"


# File system ------------------------------------------------------------------------------------
def inside(root: str, relative: str) -> str | None:
    """``root/relative`` resolved, or None when it would leave ``root`` (``..``, an absolute
    path, a symlink pointing out). ``root`` is a folder or an object-store root."""
    if not relative or "\x00" in relative or os.path.isabs(relative) or "\\" in relative:
        return None
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return None
    base = local_path(root)
    if base is None:  # an object store has no symlinks: a key without '..' stays under its root
        return join(root, relative)
    base = os.path.realpath(base)
    target = os.path.realpath(os.path.join(base, relative))
    if os.path.commonpath([base, target]) != base:
        return None
    return target
