"""Source URLs as they may be stored and shown: credentials removed, a keyed hash of the original
kept for matching.

A URL a source lists can carry credentials: ``user:password@`` userinfo, or a pre-signed URL's
signature and token in its query (S3, GCS, Azure SAS, CDN tokens). The download uses the URL as
given; only :func:`redact_url`'s form is written to tables, logs, lineage, the explorer and data
card. An opt-out request names the URL as its owner knows it (usually the original), so each row
also keeps :func:`url_key`, an HMAC-SHA256 of the original under a secret key of the data root:
equal URLs give equal keys, and a reader of the table without the key cannot test guesses of a
password against it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import posixpath
import re
import secrets
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


def url_key(url: str | None, key: bytes) -> str | None:
    """HMAC-SHA256 (hex) of the original URL under the root's key."""
    if not url:
        return None
    return hmac.new(key, url.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


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


__all__ = ["REDACTED", "SECRET_PARAMS", "KEY_ENV", "redact_text", "redact_url", "url_key", "key_uri", "key_uri_for_table", "load_url_key"]
