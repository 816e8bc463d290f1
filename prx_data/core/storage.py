"""Object-store helpers: one way to reach ``s3://`` / ``gs://`` roots and local folders alike.

Lance reaches object storage by itself (``storage_options``); this module is for everything
else the pipeline writes beside Lance tables: MDS shards, index files, journals. It uses
``pyarrow.fs``, which the stack already ships, so no extra client library is needed and the
same ``storage_options`` dict that Lance takes (keys as ``prx_data.core.settings`` builds them:
``aws_endpoint``, ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_region``,
``allow_http``) configures it.

Object stores have no rename and no directory: atomicity comes from the order of writes (data
first, the one object that makes it visible last), which is the callers' job; here a single
``write_bytes`` is one PUT, visible whole or not at all, and on a local folder it is a temp file
renamed over the target, so readers of either never see a torn file.

This is the only module that tells a local root from an object store. Everything else reads
and writes through ``locate``/``Location`` and the helpers below; the few libraries that need
real files on this machine (MDSWriter, streaming's shard readers) ask ``local_path`` for the
folder, or ``fetch_local`` for a copy, and nothing else branches on the kind of root.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from prx_data.core.s3_retry import boto3_config, pyarrow_retry_strategy, with_retries

SCHEMES = ("s3", "gs")
# object_signatures' table.
SIGNATURES_SCHEMA = pa.schema([pa.field("object", pa.large_string()), pa.field("signature", pa.string())])
# What the credentials came from, so an access error can name the settings to fix.
CREDENTIAL_SETTINGS = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION / PRX_S3_ENDPOINT"


class ObjectStoreError(RuntimeError):
    """An object store could not be reached or refused access; the message names the settings."""


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local_path(uri: str) -> str | None:
    """The absolute path on this machine when ``uri`` is a local file or folder, else None.

    For code that must hand real paths to a library (MDSWriter, streaming's ``local``) or commit
    by rename; an object store has neither, and such code goes through a local scratch copy.
    """
    return None if is_remote(uri) else os.path.abspath(uri.removeprefix("file://"))


def resolve_root(root: str) -> str:
    """A user-given root made absolute when it is a local folder; an object-store URI unchanged."""
    local = local_path(root)
    return root if local is None else local


def join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


# The one mapping of object-store credentials: each storage_options key (Lance's names, which
# every other client here is configured from) and the variable load_settings reads it from.
OPTION_ENV = {
    "aws_endpoint": "PRX_S3_ENDPOINT",
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "aws_session_token": "AWS_SESSION_TOKEN",  # temporary credentials (STS, SSO)
    "aws_region": "AWS_REGION",
}
# The ones that are secrets: never logged, never written into Dagster's run storage.
SECRET_OPTIONS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def storage_options_from_env(env: Mapping[str, str], names: Mapping[str, str] = OPTION_ENV) -> dict[str, str]:
    """The ``storage_options`` of an environment. ``names``: the variable each option is read
    from (default ``PRX_S3_ENDPOINT``, ``AWS_*``; a source's storage profile names others)."""
    options = {option: env[var] for option, var in names.items() if env.get(var)}
    if options.get("aws_endpoint", "").startswith("http://"):
        options["allow_http"] = "true"
    return options


@dataclass(frozen=True)
class S3Credentials:
    """What a ``storage_options`` dict says about reaching S3: every client here (pyarrow,
    boto3 for the table lease and streaming's downloads, streaming's environment) is configured
    from this, so an option is read the same way by all of them."""

    endpoint_url: str | None = None  # with its scheme: http:// only when allow_http says so
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str | None = None

    def boto3_kwargs(self) -> dict[str, str]:
        """Keyword arguments of ``boto3.client("s3", ...)`` (only those set)."""
        kwargs = {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key if self.access_key_id else None,
            "aws_session_token": self.session_token if self.access_key_id else None,
            "region_name": self.region,
        }
        return {k: v for k, v in kwargs.items() if v}


def s3_credentials(options: Mapping[str, str] | None) -> S3Credentials:
    options = options or {}
    endpoint = options.get("aws_endpoint") or options.get("endpoint") or None
    if endpoint and "://" not in endpoint:
        allow_http = str(options.get("allow_http", "")).lower() in ("1", "true", "yes")
        endpoint = f"{'http' if allow_http else 'https'}://{endpoint}"
    return S3Credentials(
        endpoint_url=endpoint,
        access_key_id=options.get("aws_access_key_id") or None,
        secret_access_key=options.get("aws_secret_access_key") or None,
        session_token=options.get("aws_session_token") or None,
        region=options.get("aws_region") or None,
    )


def _s3(options: Mapping[str, str]) -> pafs.S3FileSystem:
    credentials = s3_credentials(options)
    kwargs: dict = {}
    if credentials.endpoint_url:
        parsed = urlparse(credentials.endpoint_url)
        kwargs["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
        kwargs["scheme"] = parsed.scheme
    if credentials.access_key_id:
        kwargs["access_key"] = credentials.access_key_id
        kwargs["secret_key"] = credentials.secret_access_key or ""
        if credentials.session_token:
            kwargs["session_token"] = credentials.session_token
    if credentials.region:
        kwargs["region"] = credentials.region
    # Short timeouts keep a wrong endpoint quick to report; throttling is retried with backoff
    # (core.s3_retry).
    kwargs["connect_timeout"] = float(options.get("connect_timeout_s", 5))
    kwargs["request_timeout"] = float(options.get("request_timeout_s", 60))
    kwargs["retry_strategy"] = pyarrow_retry_strategy(options)
    return pafs.S3FileSystem(**kwargs)


@dataclass(frozen=True)
class Location:
    """A filesystem and the path inside it ('bucket/key' for object stores)."""

    fs: pafs.FileSystem
    path: str
    uri: str

    def child(self, *parts: str) -> Location:
        return Location(self.fs, posixpath.join(self.path, *parts), join(self.uri, *parts))


# ``s3:/bucket/x`` or ``s3:``: an object-store URI that went through a path join or Path(), which
# would otherwise be written as a folder named ``s3:`` in the current directory.
_MANGLED_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:(/(?!/).*)?")


def uri_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be a root or an object's place, or None: checked where settings are
    read, so a mistyped root fails the command before any run instead of its export step."""
    if not is_remote(uri):
        if _MANGLED_URI.fullmatch(uri):
            return f"{uri!r} looks like an object-store URI that lost a slash of its '://'; refusing to use it as a local path"
        return None
    scheme = urlparse(uri).scheme
    if scheme not in (*SCHEMES, "gcs"):
        return f"unsupported object-store scheme {scheme!r} in {uri!r} (use one of {SCHEMES})"
    return None


def locate(uri: str, storage_options: Mapping[str, str] | None = None) -> Location:
    problem = uri_problem(uri)
    if problem:
        raise ValueError(problem)
    if not is_remote(uri):
        local = uri.removeprefix("file://")
        return Location(pafs.LocalFileSystem(), os.path.abspath(local), local)
    parsed = urlparse(uri)
    path = (parsed.netloc + parsed.path).rstrip("/")
    if parsed.scheme == "s3":
        return Location(_s3(dict(storage_options or {})), path, uri.rstrip("/"))
    return Location(pafs.GcsFileSystem(), path, uri.rstrip("/"))  # gs:// or gcs:// (uri_problem)


def read_bytes(loc: Location) -> bytes:
    def read() -> bytes:
        with loc.fs.open_input_stream(loc.path) as handle:
            return handle.read()

    return read() if _is_local(loc) else with_retries(read)


def try_read_bytes(loc: Location) -> bytes | None:
    """The object's bytes, or None when it does not exist (any other failure raises)."""
    if loc.fs.get_file_info(loc.path).type != pafs.FileType.File:
        return None
    return read_bytes(loc)


@contextlib.contextmanager
def naming_path(path: str) -> Iterator[None]:
    """An OSError raised inside that names no file gets ``path`` as its file: a write to a full
    disk otherwise says only "No space left on device" (Python's writes, pyarrow's streams), and
    the run's summary could not say where. The error's number, and so its type, is kept."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or not exc.errno:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), path) from exc


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write a local file via a temp file in the same folder, fsync, then rename over ``path``.

    Same folder so the rename stays on one filesystem (atomic on POSIX); readers see the old
    file or the new one, never a torn one.
    """
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with naming_path(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def fsync_dir(path: str) -> None:
    """Persist a rename in local folder ``path`` (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_local(loc: Location) -> bool:
    return isinstance(loc.fs, pafs.LocalFileSystem)


def write_bytes(loc: Location, data: bytes) -> None:
    """The whole object at once: a rename on a local folder, one PUT on an object store."""
    if _is_local(loc):
        atomic_write_bytes(loc.path, data)
        return
    with naming_path(loc.uri), loc.fs.open_output_stream(loc.path) as handle:
        handle.write(data)


def write_if_changed(loc: Location, data: bytes) -> bool:
    """``write_bytes`` unless the file already holds exactly these bytes; True when written.

    Skipping unchanged files keeps mtimes stable, so syncs, caches and readers see no change.
    """
    if try_read_bytes(loc) == data:
        return False
    write_bytes(loc, data)
    return True


def exists(loc: Location) -> bool:
    return loc.fs.get_file_info(loc.path).type != pafs.FileType.NotFound


def is_file(loc: Location) -> bool:
    return loc.fs.get_file_info(loc.path).type == pafs.FileType.File


def file_size(loc: Location) -> int | None:
    """Bytes of a file or object (one HEAD on an object store); None when it does not exist."""
    info = loc.fs.get_file_info(loc.path)
    return info.size if info.type == pafs.FileType.File else None


def is_dir(loc: Location) -> bool:
    """A folder, or on an object store a prefix that holds at least one object."""
    return loc.fs.get_file_info(loc.path).type == pafs.FileType.Directory


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool
    size: int | None
    mtime: datetime | None


def list_dir(loc: Location) -> list[Entry]:
    """Direct children of a folder/prefix, sorted by name; [] when it does not exist."""
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, allow_not_found=True, recursive=False))
    return sorted(
        (Entry(posixpath.basename(i.path.rstrip("/")), i.type == pafs.FileType.Directory, i.size, i.mtime) for i in infos),
        key=lambda e: e.name,
    )


def glob_entries(loc: Location, pattern: str, *, recursive: bool = False) -> list[Entry]:
    """Files under ``loc`` whose name matches ``pattern``, sorted; ``Entry.name`` is the path
    relative to ``loc`` ('/'-separated). One listing, sizes and mtimes included, so callers can
    cache by (mtime, size) without a request per file. ``recursive`` walks the whole subtree."""
    selector = pafs.FileSelector(loc.path, allow_not_found=True, recursive=recursive)
    base = loc.path.rstrip("/") + "/"
    found = []
    for info in loc.fs.get_file_info(selector):
        if info.type == pafs.FileType.File and fnmatch.fnmatchcase(posixpath.basename(info.path), pattern):
            rel = info.path[len(base) :] if info.path.startswith(base) else posixpath.basename(info.path)
            found.append(Entry(rel, False, info.size, info.mtime))
    return sorted(found, key=lambda e: e.name)


def glob_files(loc: Location, pattern: str, *, recursive: bool = False) -> list[str]:
    """Relative paths of ``glob_entries``."""
    return [entry.name for entry in glob_entries(loc, pattern, recursive=recursive)]


def fetch_local(loc: Location, scratch: str) -> str:
    """A local path holding ``loc``'s bytes, for libraries that only open real files.

    A local file is returned as it is; an object is downloaded once into ``scratch`` (under its
    own path, so distinct objects never share a copy). The caller owns ``scratch``.
    """
    if _is_local(loc):
        return loc.path
    target = os.path.join(scratch, *loc.path.split("/"))
    if not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)

        def copy() -> None:
            with loc.fs.open_input_stream(loc.path) as src, open(target + ".part", "wb") as dst:
                while block := src.read(16 * 1024 * 1024):
                    dst.write(block)

        with_retries(copy)
        os.replace(target + ".part", target)
    return target


def drop_local_copy(loc: Location, path: str) -> None:
    """Remove what ``fetch_local`` downloaded for ``loc`` (a local original is left alone)."""
    if not _is_local(loc) and os.path.exists(path):
        os.remove(path)


def delete_file(loc: Location) -> None:
    try:
        loc.fs.delete_file(loc.path)
    except FileNotFoundError:
        pass


def delete_tree(loc: Location) -> None:
    """Remove a folder (or every object under a prefix); nothing there is not an error."""
    try:
        loc.fs.delete_dir(loc.path)
    except FileNotFoundError:
        pass


def upload_file(local_path: str, loc: Location, chunk: int = 16 * 1024 * 1024) -> int:
    """Copy one local file to ``loc``; returns bytes sent."""
    sent = 0
    with naming_path(loc.uri), open(local_path, "rb") as src, loc.fs.open_output_stream(loc.path) as dst:
        while block := src.read(chunk):
            dst.write(block)
            sent += len(block)
    return sent


def check_access(uri: str, storage_options: Mapping[str, str] | None, setting: str) -> None:
    """List the root once; raise ``ObjectStoreError`` naming ``setting`` and the credentials.

    Listing needs the same credentials, endpoint and bucket as every later write, so a wrong
    key, secret, endpoint or bucket fails here at startup, not hours into a run.
    """
    try:
        loc = locate(uri, storage_options)
        loc.fs.get_file_info(pafs.FileSelector(loc.path, allow_not_found=True, recursive=False))
    except ValueError as exc:
        raise ObjectStoreError(f"{setting}={uri!r}: {exc}") from exc
    except OSError as exc:
        raise ObjectStoreError(f"{setting}={uri!r}: {access_problem(exc)}") from exc


def access_problem(exc: OSError, settings: str | None = None) -> str:
    """What an object-store failure means for the user, naming ``settings`` to fix (default:
    the endpoint and credential variables ``core.settings`` reads), plus the store's own words."""
    text = str(exc)
    if any(code in text for code in ("SIGNATURE", "ACCESS_DENIED", "InvalidAccessKeyId", "INVALID_ACCESS_KEY", "403", "AccessDenied")):
        why = f"credentials were refused; check {settings or CREDENTIAL_SETTINGS}"
    elif "NoSuchBucket" in text or "NO_SUCH_BUCKET" in text:
        why = "the bucket does not exist"
    else:
        why = f"the object store could not be reached; check {settings or 'PRX_S3_ENDPOINT and ' + CREDENTIAL_SETTINGS}"
    return f"{why} ({(text.splitlines() or [''])[0][:300]})"


def streaming_env(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """Environment for mosaicml-streaming readers of an ``s3://`` tree.

    streaming builds its own boto3 client and only reads the endpoint from ``S3_ENDPOINT_URL``,
    so a trainer reading from a non-AWS store needs these set in its process.
    """
    credentials = s3_credentials(storage_options)
    candidates = {
        "S3_ENDPOINT_URL": credentials.endpoint_url,
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_DEFAULT_REGION": credentials.region,
    }
    return {var: value for var, value in candidates.items() if value}


def object_signatures(uri: str, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """Every object under an object-store prefix (or the one object ``uri`` names): ``object``
    ('bucket/key') and a ``signature`` that changes when its bytes do: the ETag and size on S3
    (one listing request per 1,000 objects, no object opened), size and mtime elsewhere. A table,
    not a dict: a prefix of tens of millions of images costs its Arrow bytes."""
    loc = locate(uri, storage_options)
    pages: list[pa.RecordBatch] = []

    def page(objects: list[str], signatures: list[str]) -> None:
        if objects:
            pages.append(
                pa.record_batch([pa.array(objects, pa.large_string()), pa.array(signatures, pa.string())], schema=SIGNATURES_SCHEMA)
            )

    if urlparse(uri).scheme == "s3":
        import boto3  # lazy: only object-store sources list through boto3

        client = boto3.client("s3", config=boto3_config(storage_options), **s3_credentials(storage_options).boto3_kwargs())
        bucket, _, key = loc.path.partition("/")
        for prefix in [key + "/", key] if key else [""]:
            for listed in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                # The exact-object pass: siblings sharing the name's start are not ours.
                found = [o for o in listed.get("Contents", ()) if prefix != key or o["Key"] == key]
                page([f"{bucket}/{o['Key']}" for o in found], [f"etag:{o['ETag'].strip(chr(34))}:{o['Size']}" for o in found])
            if pages:
                break
        return pa.Table.from_batches(pages, schema=SIGNATURES_SCHEMA)
    info = loc.fs.get_file_info(loc.path)
    infos = (
        [info]
        if info.type == pafs.FileType.File
        else loc.fs.get_file_info(pafs.FileSelector(loc.path, allow_not_found=True, recursive=True))
    )
    files = [i for i in infos if i.type == pafs.FileType.File]
    page([i.path for i in files], [f"{i.size}:{i.mtime_ns}" for i in files])
    return pa.Table.from_batches(pages, schema=SIGNATURES_SCHEMA)


def file_signature(path: str) -> str | None:
    """A local file's signature (size and mtime in ns, as ``object_signatures``); None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"
