"""Is an image file's picture data all there? A walk over its structure, no pixel decode.

Real files carry bytes after the picture: camera and editor metadata after the JPEG
end-of-image marker, zero padding, an appended thumbnail or a second image, PNG chunks after
IEND, WebP files whose RIFF size is smaller than the file. All of those decode fully, so none of
them is "truncated". The walk answers:

- ``True``: the structure is complete (the JPEG reached its end-of-image marker through its
  segments and scans, the PNG its IEND chunk, the WebP its RIFF size);
- ``False``: the data ends inside the structure;
- ``None``: the walk cannot tell (an odd but maybe valid layout).

Only ``False`` and ``None`` cost a full decode (see ``image_probe``), which then decides: ordinary
files never decode at ingest. Ordinary files do not even pay for the walk: a JPEG whose tail is
its end-of-image marker (padding aside), or a PNG ending in IEND, is taken as complete from
that look alone, as before (a cut file ends there only by a 1 in 65536 chance).
"""

from __future__ import annotations

import re

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# In entropy-coded data 0xFF is followed by 0x00 (stuffing), a restart marker 0xD0-0xD7 or
# more 0xFF fill bytes; anything else is the next real marker.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def jpeg_complete(data: bytes) -> bool | None:
    n = len(data)
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    while True:
        if pos >= n:
            return False
        if data[pos] != 0xFF:
            # Stray bytes between segments: libjpeg skips them with a warning; so do we.
            pos = data.find(b"\xff", pos)
            if pos < 0:
                return False
        while pos < n and data[pos] == 0xFF:
            pos += 1
        if pos >= n:
            return False
        marker = data[pos]
        pos += 1
        if marker == 0xD9:
            return True
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            continue  # standalone markers carry no length
        if pos + 2 > n:
            return False
        length = int.from_bytes(data[pos : pos + 2], "big")
        if length < 2:
            return None
        pos += length
        if pos > n:
            return False
        if marker == 0xDA:  # start of scan: skip the entropy-coded data
            found = _NEXT_MARKER.search(data, pos)
            if found is None:
                return False
            pos = found.start()


def png_complete(data: bytes) -> bool | None:
    if not data.startswith(_PNG_SIGNATURE):
        return None
    n = len(data)
    pos = len(_PNG_SIGNATURE)
    while pos + 8 <= n:
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = data[pos + 4 : pos + 8]
        pos += 12 + length
        if pos > n:
            return False
        if kind == b"IEND":
            return True
    return False


def webp_complete(data: bytes) -> bool | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    size = int.from_bytes(data[4:8], "little")
    return len(data) >= 8 + size


def _jpeg_fast(data: bytes) -> bool | None:
    # Nearly every JPEG ends with its end-of-image marker (maybe padded): one look at the tail
    # settles it. Only files that do not (trailing metadata, an appended image...) pay for the
    # walk, which reads every scan.
    if data[-2:] == b"\xff\xd9" or data[-1024:].rstrip(b"\x00\r\n \t").endswith(b"\xff\xd9"):
        return True
    return jpeg_complete(data)


def _png_fast(data: bytes) -> bool | None:
    if data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82":
        return True
    return png_complete(data)


CHECKS = {"JPEG": _jpeg_fast, "MPO": _jpeg_fast, "PNG": _png_fast, "WEBP": webp_complete}


def complete(data: bytes, image_format: str) -> bool | None:
    """True/False/None as described above; True for formats without a check."""
    check = CHECKS.get(image_format)
    return True if check is None else check(data)
