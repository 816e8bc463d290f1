"""Strict decoding of a JPEG's entropy-coded data, so that a file cut mid-scan is never used.

A JPEG cut mid-scan and ending in ``FF D9`` (a broken upload, a resumed download) passes every
look at its structure, and Pillow decodes it without a word, a third of its rows flat grey.
libjpeg-turbo (``simplejpeg``) with warnings as errors is what tells: every scan is
Huffman-decoded, and a scan that ends early or holds a bad code raises.

Huffman-decoding a photo's scans is most of what any decode costs, so it is done once per image,
where the pixels are needed first: the perceptual hash's reduced grey decode
(``decode.open_for_hash``). Ingest, which must run near the speed of copying bytes, keeps to
headers and the structure walk (``ingest.rows.image_probe``).
"""

from __future__ import annotations

import numpy as np
import simplejpeg

# The one libjpeg warning accepted: junk between the last scan and the end-of-image marker
# (some cameras and editors pad there). It is raised after every scan was decoded, so the
# picture is whole. Every other warning rejects: truncation ("premature end of data segment",
# "premature end of JPEG file"), corrupt entropy data (bad Huffman code, lost restart marker)
# and, conservatively, warnings about metadata segments, because strict decoding stops at the
# first warning and the scans after it would go unchecked. None of the real photos at hand
# (scikit-image, scikit-learn, matplotlib samples, benchmarks/photos.py) raises any warning.
_ACCEPTED_WARNING = "extraneous bytes before marker 0xd9"
# Messages of libjpeg that say the data itself is short or damaged (rather than unsupported).
_CORRUPT_MARKS = ("corrupt jpeg data", "premature end", "bogus", "huffman", "inconsistent progression")


class JpegDataError(ValueError):
    """The entropy-coded data is unusable; ``truncated`` when the file ends inside it."""

    def __init__(self, message: str, truncated: bool) -> None:
        super().__init__(message)
        self.truncated = truncated


def _reason(message: str) -> JpegDataError | None:
    """What libjpeg's ``message`` says of the data; None for the accepted padding warning."""
    message = message.strip()
    lowered = message.lower()
    if lowered.endswith(_ACCEPTED_WARNING):
        return None
    if "premature end of jpeg file" in lowered:
        return JpegDataError("the JPEG file ends inside its picture data", truncated=True)
    if any(mark in lowered for mark in _CORRUPT_MARKS):
        detail = message.split(":", 1)[1].strip() if lowered.startswith("corrupt jpeg data:") else message
        return JpegDataError(f"truncated or corrupt JPEG data: {detail[:1].lower()}{detail[1:]}", truncated=False)
    return JpegDataError(f"undecodable JPEG: {message}", truncated=False)


def _decode_strict(data: bytes, **size) -> np.ndarray | None:
    """Grey pixels with warnings as errors; None for the accepted padding warning (strict
    decoding stops there, after every scan). Raises ``JpegDataError``."""
    try:
        return simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=True, **size)
    except ValueError as exc:
        error = _reason(str(exc))
        if error is not None:
            raise error from None
        return None


def decode_gray(data: bytes, factor: int, stored_size: tuple[int, int]) -> np.ndarray:
    """The stored frame as 8-bit grey at 1/``factor`` scale (1, 2, 4 or 8), every scan checked.

    The pixels are libjpeg's own grey output at that DCT scale, the same that Pillow's
    ``draft("L", ...)`` gives for a YCbCr, RGB or grey JPEG. Raises ``JpegDataError``.
    """
    width, height = stored_size
    # turbojpeg offers M/8 scales too: the minimum size pins the one 1/factor scale.
    size = {"min_factor": factor, "min_width": -(-width // factor), "min_height": -(-height // factor)}
    pixels = _decode_strict(data, **size)
    if pixels is None:
        pixels = simplejpeg.decode_jpeg(data, colorspace="GRAY", strict=False, **size)
    return pixels[:, :, 0]


def check(data: bytes) -> None:
    """Raise ``JpegDataError`` unless every scan decodes cleanly (at 1/8 scale, the cheapest:
    the IDCT is scaled, the Huffman decoding is not, so a cut chroma-only scan of a progressive
    file is caught too). For JPEGs whose pixels are not taken from ``decode_gray``."""
    _decode_strict(data, min_factor=8, min_height=1, min_width=1)
