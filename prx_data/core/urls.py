"""Source URLs as they may be stored and shown: credentials removed, a keyed hash of the original
kept for matching.

A URL a source lists can carry credentials: ``user:password@`` userinfo, or a pre-signed URL's
signature and token in its query (S3, GCS, Azure SAS, CDN tokens). The download uses the URL as
given; only :func:`redact_url`'s form is written to tables, logs, lineage, the explorer and data
card. An opt-out request names the URL as its owner knows it (usually the original), so each row
also keeps :func:`url_key`, an HMAC-SHA256 of the original under a secret key of the data root:
equal URLs give equal keys, and a reader of the table without the key cannot test guesses of a
password against it.

URLs that RFC 3986 (section 6.2.2 and the http(s) scheme rules of 6.2.3) calls equivalent get one
key: :func:`normalize_url` is applied before hashing, and wherever a URL is compared (opt-out
requests, ``lineage --url``, ingest's matcher). ``http`` and ``https`` stay different URLs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import posixpath
import re
import secrets
import string
from collections.abc import Mapping
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from prx_data.core.storage import is_remote, locate, try_read_bytes, write_bytes

REDACTED = "REDACTED"
# How a kept opt-out request names a URL by its keyed hash instead of its text.
URL_KEY_PREFIX = "urlkey:"

# Query (and fragment) parameter names that carry a credential, compared case-insensitively.
# Signed-URL schemes: AWS SigV4 (X-Amz-*), AWS SigV2/CloudFront (Signature, Key-Pair-Id, Policy),
# GCS (X-Goog-*), Azure SAS (sig, se/sp are not secret), plus the common token parameter names.
SECRET_PARAMS = frozenset(
    name.lower()
    for name in (
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "AWSAccessKeyId",
        "X-Goog-Signature",
        "X-Goog-Credential",
        "GoogleAccessId",
        "Signature",
        "sig",
        "Policy",
        "Key-Pair-Id",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth",
        "authorization",
        "key",
        "api_key",
        "apikey",
        "api-key",
        "secret",
        "client_secret",
        "password",
        "passwd",
        "pwd",
        "session",
        "sessionid",
        "jwt",
        "hmac",
    )
)

KEY_ENV = "PRX_URL_HASH_KEY"  # hex; overrides the key file (set it where roots are shared read-only)
KEY_FILE = "url_hash.key"


def _redact_params(text: str) -> tuple[str, bool]:
    pairs = parse_qsl(text, keep_blank_values=True)
    if not pairs or not any(k.lower() in SECRET_PARAMS for k, _ in pairs):
        return text, False
    parts = []
    for k, v in pairs:
        value = REDACTED if k.lower() in SECRET_PARAMS else v
        parts.append(f"{quote(k, safe='-_.~')}={quote(value, safe='-_.~/:')}")
    return "&".join(parts), True


def redact_url(url: str | None) -> str | None:
    """``url`` without userinfo and with every credential parameter's value replaced by
    ``REDACTED``. A URL with nothing to hide comes back unchanged (byte for byte)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        # Not parseable as a URL (e.g. a bad IPv6 literal): keep nothing that could be a secret.
        return url.split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1]
    netloc, changed = parts.netloc, False
    if "@" in netloc:
        netloc, changed = netloc.rsplit("@", 1)[1], True
    query, q_changed = _redact_params(parts.query) if parts.query else ("", False)
    fragment, f_changed = _redact_params(parts.fragment) if "=" in parts.fragment else (parts.fragment, False)
    if not (changed or q_changed or f_changed):
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")


def redact_text(text: str | None) -> str | None:
    """``text`` (an error message, a log line) with every URL in it redacted."""
    if not text or "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)) or "", text)


_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}


def _percent(text: str) -> str:
    """Unreserved characters decoded (``%7E`` -> ``~``), every other escape in upper-case hex."""

    def one(match: re.Match) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _PERCENT.sub(one, text) if "%" in text else text


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4."""
    out: list[str] = []
    while path:
        if path.startswith("../"):
            path = path[3:]
        elif path.startswith("./"):
            path = path[2:]
        elif path.startswith("/./"):
            path = path[2:]
        elif path == "/.":
            path = "/"
        elif path.startswith("/../") or path == "/..":
            path = "/" + path[4:]
            if out:
                out.pop()
        elif path in (".", ".."):
            path = ""
        else:
            end = path.find("/", 1 if path.startswith("/") else 0)
            end = len(path) if end == -1 else end
            out.append(path[:end])
            path = path[end:]
    return "".join(out)


def _netloc(scheme: str, netloc: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    host, port = hostport, ""
    if hostport.startswith("["):  # an IPv6 literal holds colons of its own
        close = hostport.find("]")
        if close != -1 and hostport[close + 1 : close + 2] == ":":
            host, port = hostport[: close + 1], hostport[close + 2 :]
    elif ":" in hostport:
        host, _, port = hostport.rpartition(":")
    host = _percent(host).lower()
    if port and port.isdigit():
        port = str(int(port))
    if not port or port == DEFAULT_PORTS.get(scheme):
        hostport = host
    else:
        hostport = f"{host}:{port}"
    return f"{userinfo}{at}{hostport}"


def normalize_url(url: str) -> str:
    """The one spelling of ``url`` that every RFC 3986-equivalent spelling shares: scheme and
    host in lower case, the scheme's default port dropped, percent-escapes of unreserved
    characters decoded and the others in upper-case hex, dot segments removed, an empty http(s)
    path as ``/``, and the fragment dropped (it never reaches the server). The userinfo, path
    and query otherwise stay as written (their case is significant); ``http`` and ``https`` are
    different schemes and stay different. Text that does not parse as a URL comes back as it is."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return url
    scheme = parts.scheme.lower()
    path = _percent(parts.path)
    if parts.netloc or path.startswith("/"):
        path = _remove_dot_segments(path)
    if parts.netloc and not path and scheme in DEFAULT_PORTS:
        path = "/"
    netloc = _netloc(scheme, parts.netloc) if parts.netloc else ""
    return urlunsplit((scheme, netloc, path, _percent(parts.query), ""))


def url_key(url: str | None, key: bytes) -> str | None:
    """HMAC-SHA256 (hex) of the normalised original URL (:func:`normalize_url`) under the root's
    key: equivalent spellings of one URL have one key."""
    if not url:
        return None
    return _hmac(normalize_url(url), key)


def url_keys(url: str | None, key: bytes) -> list[str]:
    """Every key a stored row of ``url`` may hold: :func:`url_key`, and the hash of the URL as
    written, which rows hashed before normalisation hold until their source's next ingest
    re-keys them (so no opt-out stops matching in between)."""
    if not url:
        return []
    return list(dict.fromkeys([_hmac(normalize_url(url), key), _hmac(url, key)]))


def _hmac(text: str, key: bytes) -> str:
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def key_uri(lance_root: str) -> str:
    return posixpath.join(lance_root.rstrip("/"), "_keys", KEY_FILE)


def key_uri_for_table(table_uri: str) -> str:
    """The key of the root a raw table (``<lance_root>/sources/<name>.lance``) lives under.

    Never above the bucket: a table at ``s3://bucket/t.lance`` keys under ``s3://bucket``, where
    two plain dirnames would give ``s3:``, a relative local path that put a key in the cwd."""
    table_uri = table_uri.rstrip("/")
    root = posixpath.dirname(posixpath.dirname(table_uri))
    scheme, sep, rest = table_uri.partition("://")
    if sep:
        bucket = f"{scheme}://{rest.split('/', 1)[0]}"
        if not root.startswith(bucket):
            root = bucket
    elif not root:
        root = "."
    return key_uri(root)


def load_url_key(
    uri: str, options: Mapping[str, str] | None = None, *, create: bool = False, environ: Mapping[str, str] | None = None
) -> bytes | None:
    """The root's URL hash key: ``PRX_URL_HASH_KEY`` (hex) if set, else the key file at ``uri``,
    made (32 random bytes) when ``create`` and absent. None: no key yet (nothing was hashed)."""
    environ = os.environ if environ is None else environ
    if environ.get(KEY_ENV):
        try:
            return bytes.fromhex(environ[KEY_ENV])
        except ValueError:
            raise ValueError(f"{KEY_ENV} must be hex (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`)") from None
    loc = locate(uri, options)
    found = try_read_bytes(loc)
    if found is not None or not create:
        return found
    key = secrets.token_bytes(32)
    if is_remote(uri):
        write_bytes(loc, key)
    else:
        os.makedirs(os.path.dirname(loc.path), mode=0o700, exist_ok=True)
        try:
            # O_EXCL: two first ingests at once agree on one key (the loser reads the winner's).
            fd = os.open(loc.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return try_read_bytes(loc)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        return key
    # An object store has no create-if-absent here: read back what won.
    return try_read_bytes(loc)


__all__ = [
    "REDACTED",
    "SECRET_PARAMS",
    "KEY_ENV",
    "normalize_url",
    "redact_text",
    "redact_url",
    "url_key",
    "url_keys",
    "key_uri",
    "key_uri_for_table",
    "load_url_key",
]
