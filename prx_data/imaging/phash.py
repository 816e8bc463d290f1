"""64-bit DCT perceptual hash: duplicates are images whose hashes are equal.

Algorithm (the classic pHash, as in ``imagehash.phash``): grayscale, resize to 32x32 with a
fixed filter, 2-D DCT-II, keep the 8x8 lowest frequencies (DC included), set a bit for each
coefficient above their median. Bit 63 (the most significant) is coefficient (0, 0), then
row-major, so the unsigned value equals ``int(str(imagehash.phash(thumbnail)), 16)``.

What is hashed is ``decode.open_for_hash``'s output (JPEGs decoded at a reduced DCT scale, other
formats block-averaged by the same factor, both resampled from the exact picture box), and a
different decode gives different bits on textured images, so ``PHASH_VERSION`` names both the
algorithm and that decode path. Change either and the version must change: hashes of different
versions are never compared.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

import numpy as np
from PIL import Image

from prx_data.imaging.decode import (
    DEFAULT_MAX_PIXELS,
    HASH_DRAFT_SIDE,
    Box,
    DecodeError,
    open_for_hash,
)

THUMB_SIDE: Final = 32
LOW_SIDE: Final = 8
# Chosen on 200 distinct 1-2 MP photos from benchmarks/photos.py: a triangle (bilinear) filter
# over a float thumbnail, sampled from the exact picture box, kept the hash equal for ~99% of
# q92 re-encodes and ~89% of half-size copies; BOX or 8-bit thumbnails did markedly worse (the
# tests re-measure this on 60 smaller photos).
THUMB_FILTER: Final = Image.Resampling.BILINEAR
PHASH_VERSION: Final = f"dct64-draftL{HASH_DRAFT_SIDE}-exactbox-bilinearF{THUMB_SIDE}-v1"

_MASK64: Final = (1 << 64) - 1


@lru_cache(maxsize=1)
def _dct_rows() -> np.ndarray:
    """The first 8 rows of the unnormalised 32-point DCT-II (scipy.fft.dct's default scaling).

    Two small matrix products give the low-frequency block directly instead of a full
    32x32 transform; the median threshold does not care about the overall scale.
    """
    k = np.arange(LOW_SIDE)[:, None]
    n = np.arange(THUMB_SIDE)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * n + 1) / (2 * THUMB_SIDE))


def low_frequencies(thumbnail: np.ndarray) -> np.ndarray:
    """The 8x8 low-frequency block of the 2-D DCT-II of a 32x32 array."""
    rows = _dct_rows()
    return rows @ thumbnail.astype(np.float64) @ rows.T


def hash_thumbnail(thumbnail: np.ndarray) -> int:
    """Unsigned 64-bit hash of a 32x32 grayscale array."""
    # Rounded so that coefficients that are zero in exact arithmetic (flat or symmetric images)
    # do not become float noise whose sign depends on the BLAS kernel of the machine: hashes
    # made on different workers must agree bit for bit.
    low = np.round(low_frequencies(thumbnail), 3)
    bits = (low > np.median(low)).ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def phash_image(gray: Image.Image, box: Box | None = None) -> int:
    """Unsigned 64-bit hash of an image decoded by ``open_for_hash`` (``box``: its picture box).

    The thumbnail is resampled in 32-bit float so that it is not rounded to 8 bits: rounding
    noise alone flips coefficients that sit near the median.
    """
    source = gray if gray.mode == "L" else gray.convert("L")
    thumbnail = source.convert("F").resize((THUMB_SIDE, THUMB_SIDE), THUMB_FILTER, box=box)
    return hash_thumbnail(np.asarray(thumbnail))


def phash_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> int:
    """The hash of encoded image bytes, as the signed int64 stored in Lance.

    Raises ``DecodeError`` for unusable images.
    """
    gray, box = open_for_hash(data, max_pixels)
    return to_signed(phash_image(gray, box))


def phash_row(data: bytes | None, max_pixels: int = DEFAULT_MAX_PIXELS) -> dict[str, object]:
    """One row of ``schema.PHASH_COLUMNS``; never raises, errors go to ``phash_error``."""
    if data is None:
        return {"phash": None, "phash_version": PHASH_VERSION, "phash_error": "no image bytes"}
    try:
        value = phash_bytes(data, max_pixels)
    except DecodeError as exc:
        return {"phash": None, "phash_version": PHASH_VERSION, "phash_error": str(exc)}
    except Exception as exc:  # anything unforeseen stays a per-row error
        error = f"hash_failed: {type(exc).__name__}: {exc}"[:500]
        return {"phash": None, "phash_version": PHASH_VERSION, "phash_error": error}
    return {"phash": value, "phash_version": PHASH_VERSION, "phash_error": None}


def to_signed(value: int) -> int:
    """Unsigned 64-bit -> the int64 with the same bit pattern (what Lance/Arrow store)."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned(value: int) -> int:
    """Signed int64 (or unsigned) -> unsigned 64-bit with the same bit pattern."""
    return value & _MASK64


def hamming(a: int, b: int) -> int:
    """Number of differing bits; accepts signed or unsigned forms."""
    return ((a ^ b) & _MASK64).bit_count()
