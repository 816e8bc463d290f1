"""Sources under an object-store prefix: credentials, containment, listing and reads.

The counterpart of ``contained.Root`` for ``s3://`` / ``gs://`` locations, through the project's
one storage layer (``core.storage``, pyarrow.fs). Each ingest worker opens its own objects; the
driver only lists.

Containment on a prefix is lexical, since an object store has no symlinks and no directories:
a path that names another scheme, another bucket, a key outside the root prefix, a local
absolute path, or any ``..`` segment is refused as ``outside_root``. ``..`` is refused even when
it would land back inside: S3 keys may contain ``..`` literally, so it has no single meaning.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import BinaryIO
from urllib.parse import urlparse

import pyarrow.fs as pafs

from prx_data.core.schema import Status
from prx_data.core.storage import Location, access_problem, locate, storage_options_from_env
from prx_data.ingest.read.raw_item import SourceUnavailable
from prx_data.ingest.registry import SourceSpec, StorageProfile

# Sequential readers (tar headers, JSONL lines) read through this much buffer: one ranged GET
# per buffer, not one per 512-byte tar block.
STREAM_BUFFER = 8 * 1024 * 1024
# Whole-object reads (images, sidecars) ask for this much per request.
READ_CHUNK = 16 * 1024 * 1024


class SourceAccessError(SourceUnavailable):
    """The object store refused or could not be reached; the message names what to set."""


def source_storage_options(spec: SourceSpec, defaults: Mapping[str, str] | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The options that reach ``spec``'s location: its profile's variables, else ``defaults``
    (the roots' settings). A variable the profile names but the environment lacks is an error."""
    if spec.storage is None:
        return dict(defaults or {})
    env = os.environ if env is None else env
    profile = spec.storage
    missing = [name for name in profile.variables() if not env.get(name)]
    if missing:
        raise SourceAccessError(f"source {spec.name!r}: storage profile names unset environment variable(s) {missing}")
    names = {
        option: name
        for attr, option in (
            ("endpoint_env", "aws_endpoint"),
            ("access_key_id_env", "aws_access_key_id"),
            ("secret_access_key_env", "aws_secret_access_key"),
            ("session_token_env", "aws_session_token"),
            ("region_env", "aws_region"),
        )
        if (name := getattr(profile, attr))
    }
    options = storage_options_from_env(env, names)
    if profile.region and "aws_region" not in options:
        options["aws_region"] = profile.region
    return options


def settings_to_fix(profile: StorageProfile | None) -> str | None:
    """What to name in an access error; None: the roots' settings (``access_problem`` names them)."""
    if profile is None:
        return None
    return "the variables of the spec's storage profile: " + ", ".join(profile.variables() or ["(none named)"])


def fixed_prefix(uri: str) -> str:
    """The part of a URI before its first glob segment (the whole URI when it has none)."""
    scheme, rest = uri.split("://", 1)
    parts = rest.split("/")
    for i, part in enumerate(parts):
        if any(ch in part for ch in "*?["):
            return f"{scheme}://" + "/".join(parts[:i])
    return uri


def _glob_regex(pattern: str) -> re.Pattern:
    """Python's ``glob(recursive=True)`` rules on '/'-separated keys: ``**`` as a whole segment
    spans any number of folders, ``*`` and ``?`` stay inside one, ``[...]`` is a class."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:[^/]+/)*")
            i += 3
            continue
        if pattern.startswith("**", i) and i + 2 == n and (i == 0 or pattern[i - 1] == "/"):
            out.append(".*")
            i += 2
            continue
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z")


class Foreign(str):
    """A path-column value this store cannot hold (another scheme, a local absolute path)."""


class ObjectRoot:
    """The prefix a source's reads must stay inside, and the filesystem that reaches it."""

    def __init__(self, uri: str, options: Mapping[str, str] | None, profile: StorageProfile | None = None) -> None:
        self.loc: Location = locate(uri, options)
        self.scheme = urlparse(uri).scheme
        self.path = self.loc.path.rstrip("/")
        self._prefix = self.path + "/"
        self.options = dict(options or {})
        self.profile = profile

    # paths are fs paths, 'bucket/key', shown as URIs
    def uri(self, path: str) -> str:
        return f"{self.scheme}://{path}"

    def to_path(self, uri: str) -> str:
        parsed = urlparse(uri)
        return (parsed.netloc + parsed.path).rstrip("/")

    def __str__(self) -> str:
        return self.uri(self.path)

    def resolve(self, text: str, base: str) -> str:
        """A path-column value as a path: a URI of this store, or relative to ``base``. Anything
        else comes back as ``Foreign``, which ``refuse`` refuses."""
        if "://" in text:
            parsed = urlparse(text)
            if parsed.scheme != self.scheme:
                return Foreign(text)
            return parsed.netloc + parsed.path
        if text.startswith("/"):
            return Foreign(text)
        return posixpath.join(base, text)

    def refuse(self, path: str) -> tuple[str, str] | None:
        """(status, message) when ``path`` may not be read."""
        shown = path if isinstance(path, Foreign) else self.uri(path)
        if isinstance(path, Foreign) or ".." in path.split("/") or not path.startswith(self._prefix):
            return Status.OUTSIDE_ROOT.value, f"{shown} is outside the source root {self}"
        return None

    def open(self, path: str, *, random_access: bool = False) -> BinaryIO:
        """The object, buffered for sequential reads unless ``random_access`` (Parquet)."""
        handle = self.loc.fs.open_input_file(path)
        return handle if random_access else io.BufferedReader(handle, STREAM_BUFFER)

    def size(self, handle) -> int:
        raw = getattr(handle, "raw", handle)
        return raw.size()

    # listing
    def is_object(self, path: str) -> bool:
        return self.loc.fs.get_file_info(path).type == pafs.FileType.File

    def check(self, uri: str) -> None:
        """List ``uri``'s fixed prefix once: raises SourceAccessError naming what to set."""
        path = self.to_path(fixed_prefix(uri))
        bucket = path.split("/", 1)[0]
        try:
            self.loc.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
            if self.loc.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise OSError("NoSuchBucket: the bucket does not exist")
        except OSError as exc:
            raise SourceAccessError(f"location {uri!r}: {access_problem(exc, settings_to_fix(self.profile))}") from exc

    def files(self, uri: str, suffixes: tuple[str, ...]) -> list[str]:
        """Objects a location names: a glob's matches, a prefix's objects with ``suffixes``, or
        the one object. A prefix with nothing under it is [] (allow_empty decides, as for an
        emptied folder)."""
        return [path for path, _ in self.sized_files(uri, suffixes)]

    def sized_files(self, uri: str, suffixes: tuple[str, ...]) -> list[tuple[str, int | None]]:
        """``files`` with each object's size, from the same listing (no request per object)."""
        self.check(uri)
        fs = self.loc.fs
        prefix_uri = fixed_prefix(uri)
        base = self.to_path(prefix_uri)
        if prefix_uri != uri:
            regex = _glob_regex(uri[len(prefix_uri) :].lstrip("/"))
            return sorted(p for p in self._walk_files(base) if regex.match(p[0][len(base) + 1 :]))
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.File:
            return [(base, info.size)]
        return sorted(p for p in self._walk_files(base) if posixpath.splitext(p[0])[1].lower() in suffixes)

    def _walk_files(self, base: str) -> Iterator[tuple[str, int | None]]:
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        for info in self.loc.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                yield info.path, info.size

    def scandir(self, folder: str) -> list[tuple[str, bool]]:
        """(name, is_folder) of a prefix's direct children, sorted by name (one delimited list)."""
        infos = self.loc.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True, recursive=False))
        return sorted(((posixpath.basename(i.path.rstrip("/")), i.type == pafs.FileType.Directory) for i in infos), key=lambda e: e[0])
