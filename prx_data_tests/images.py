"""Small images made by the tests, one per kind of awkward input."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def photo_like(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth random colour field plus noise: compresses like a photo, unique per seed."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    noise = rng.integers(-12, 12, size=(height, width, 3))
    return Image.fromarray(np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8))


def jpeg(width: int = 640, height: int = 480, seed: int = 0, quality: int = 90, **save) -> bytes:
    buf = io.BytesIO()
    photo_like(width, height, seed).save(buf, "JPEG", quality=quality, **save)
    return buf.getvalue()


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def exif_rotated_jpeg(width: int = 640, height: int = 480) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    return jpeg(width, height, seed=7, exif=exif.tobytes())


def cmyk_jpeg() -> bytes:
    buf = io.BytesIO()
    photo_like(400, 300, 3).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def png16() -> bytes:
    arr = (np.linspace(0, 65535, 300 * 400).reshape(300, 400)).astype(np.uint16)
    img = Image.fromarray(arr)  # uint16 -> mode I;16
    assert img.mode == "I;16", img.mode
    return png(img)


def palette_png_with_transparency() -> bytes:
    img = photo_like(320, 240, 4).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    buf = io.BytesIO()
    img.save(buf, "PNG", transparency=0)
    return buf.getvalue()


def animated_gif() -> bytes:
    frames = [photo_like(200, 150, s).convert("P") for s in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


def decompression_bomb(side: int = 12_000) -> bytes:
    """A 1-bit PNG of side² pixels that compresses to a few KB."""
    return png(Image.new("1", (side, side), 0))


def truncated_jpeg() -> bytes:
    data = jpeg(seed=9)
    return data[: len(data) // 2]
