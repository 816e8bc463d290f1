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

A flat or near-flat image has no usable fingerprint: its low-frequency block has (almost) no
spread, so every such image hashes to about the same value (a flat one to exactly
``0x8000000000000000``, the DC bit alone), and a red square would match a blue one. Such a hash
is marked ``degenerate``: dedup and opt-out matching then use the exact content key
(``image_sha256``) instead of the phash.
"""

from __future__ import annotations

from dataclasses import dataclass
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
# Degenerate below this RMS (in gray levels, 0..255) of the thumbnail's low-frequency content
# without DC: the contrast a hash bit can stand on. On 380 distinct real photos from
# benchmarks/photos.py (0.1-0.4 MP) the lowest was 1.85; a flat colour is 0, sensor-like noise
# of sigma 4-20 over a flat colour 0.04-0.19 (noise averages out in a 32x32 thumbnail), a ramp
# of 2 gray levels across the image 0.49, of 4 levels 1.1.
DEGENERATE_SPREAD: Final = 1.0
PHASH_VERSION: Final = f"dct64-draftL{HASH_DRAFT_SIDE}-exactbox-bilinearF{THUMB_SIDE}-v2-flat{DEGENERATE_SPREAD:g}"

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


@dataclass(frozen=True)
class Fingerprint:
    value: int  # unsigned 64-bit hash
    degenerate: bool  # no structure: never compare ``value`` perceptually
    spread: float  # RMS gray levels of the low-frequency content without DC


@lru_cache(maxsize=1)
def _orthonormal_scale() -> np.ndarray:
    """Factors that turn the unnormalised low block into orthonormal DCT coefficients."""
    f = np.full(LOW_SIDE, np.sqrt(1 / (2 * THUMB_SIDE)))
    f[0] = np.sqrt(1 / (4 * THUMB_SIDE))
    return f[:, None] * f[None, :]


def low_frequency_spread(low: np.ndarray) -> float:
    """RMS deviation (gray levels) that the low block's AC coefficients put into the thumbnail.

    The orthonormal DCT keeps energy, so this is the standard deviation of the thumbnail
    low-passed to those 63 frequencies; it does not depend on the overall brightness.
    """
    ortho = low * _orthonormal_scale()
    energy = float(np.sum(ortho**2) - ortho[0, 0] ** 2)
    return float(np.sqrt(max(energy, 0.0))) / THUMB_SIDE


def _bits(low: np.ndarray) -> int:
    # Rounded so that coefficients that are zero in exact arithmetic (flat or symmetric images)
    # do not become float noise whose sign depends on the BLAS kernel of the machine: hashes
    # made on different workers must agree bit for bit.
    low = np.round(low, 3)
    bits = (low > np.median(low)).ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def hash_thumbnail(thumbnail: np.ndarray) -> int:
    """Unsigned 64-bit hash of a 32x32 grayscale array."""
    return _bits(low_frequencies(thumbnail))


def fingerprint_thumbnail(thumbnail: np.ndarray) -> Fingerprint:
    """The hash of a 32x32 grayscale array and whether it is degenerate."""
    low = low_frequencies(thumbnail)
    spread = low_frequency_spread(low)
    return Fingerprint(_bits(low), spread < DEGENERATE_SPREAD, spread)


def fingerprint_image(gray: Image.Image, box: Box | None = None) -> Fingerprint:
    """The 64-bit hash (and degenerate flag) of an image decoded by ``open_for_hash`` (``box``: its
    picture box).

    The thumbnail is resampled in 32-bit float so that it is not rounded to 8 bits: rounding
    noise alone flips coefficients that sit near the median.
    """
    source = gray if gray.mode == "L" else gray.convert("L")
    thumbnail = source.convert("F").resize((THUMB_SIDE, THUMB_SIDE), THUMB_FILTER, box=box)
    return fingerprint_thumbnail(np.asarray(thumbnail))


def fingerprint_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Fingerprint:
    """The fingerprint of encoded image bytes (``value`` unsigned). Raises ``DecodeError``."""
    gray, box = open_for_hash(data, max_pixels)
    return fingerprint_image(gray, box)


def phash_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> int:
    """The hash of encoded image bytes, as the signed int64 stored in Lance.

    Raises ``DecodeError`` for unusable images.
    """
    return to_signed(fingerprint_bytes(data, max_pixels).value)


def phash_row(data: bytes | None, max_pixels: int = DEFAULT_MAX_PIXELS) -> dict[str, object]:
    """One row of ``schema.PHASH_COLUMNS``; never raises, errors go to ``phash_error``."""
    if data is None:
        return _failed("no image bytes")
    try:
        found = fingerprint_bytes(data, max_pixels)
    except DecodeError as exc:
        return _failed(str(exc))
    except Exception as exc:  # anything unforeseen stays a per-row error
        return _failed(f"hash_failed: {type(exc).__name__}: {exc}"[:500])
    return {
        "phash": to_signed(found.value),
        "phash_degenerate": found.degenerate,
        "phash_version": PHASH_VERSION,
        "phash_error": None,
    }


def _failed(error: str) -> dict[str, object]:
    return {"phash": None, "phash_degenerate": None, "phash_version": PHASH_VERSION, "phash_error": error}


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
