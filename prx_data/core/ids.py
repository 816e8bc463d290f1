"""Stable sample identity: the same item of the same source always gets the same id."""

from __future__ import annotations

import hashlib
import unicodedata


def normal_key(key: str) -> str:
    """A source key in Unicode NFC: ``café.jpg`` spelt with a combining accent (as macOS names
    files) and with the precomposed letter are one key, so a request or lookup in either
    spelling finds the row. Readers keep the name as found to open the file."""
    return unicodedata.normalize("NFC", key)


def sample_id(source: str, source_key: str) -> str:
    """128-bit hex id from (source name, key inside the source), the key taken in NFC
    (:func:`normal_key`).

    128 bits, not 64: at a billion samples a 64-bit id has a few-percent chance of a collision.
    """
    # surrogateescape: a key holding undecodable bytes still gets its one id, never an error.
    digest = hashlib.blake2b(f"{source}\x00{normal_key(source_key)}".encode("utf-8", "surrogateescape"), digest_size=16)
    return digest.hexdigest()


def is_utf8(text: str) -> bool:
    """False for a str holding lone surrogates: bytes that were not UTF-8 (a file or member name
    decoded with ``surrogateescape``), which no Arrow column or log line can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escape_undecodable(text: str) -> str:
    """``text`` with each undecodable byte as ``%XX`` (upper-case hex): a stable, printable key
    for a name that is not UTF-8 (``caf\\udce9.jpg`` -> ``caf%E9.jpg``). The same name always gives
    the same key; a name spelled that way in valid UTF-8 would share it, and then the first
    occurrence wins like any repeated key."""
    raw = text.encode("utf-8", "surrogateescape")
    out, pos = [], 0
    while pos < len(raw):
        try:
            out.append(raw[pos:].decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            out.append(raw[pos : pos + exc.start].decode("utf-8"))
            out.extend(f"%{b:02X}" for b in raw[pos + exc.start : pos + exc.end])
            pos += exc.end
    return "".join(out)


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_CONTROL.update({c: f"\\u{c:04x}" for c in (0x85, 0x2028, 0x2029)})


def printable(value: object) -> str:
    """``value`` safe for one log line: control characters and line separators escaped
    (``\\n``, ``\\x1b``...), undecodable bytes as ``%XX``. For values that come from the data
    (file names, keys, captions), so that none can forge or split a log line."""
    text = str(value)
    if not is_utf8(text):
        text = escape_undecodable(text)
    return text.translate(_CONTROL)
