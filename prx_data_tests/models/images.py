"""Small test images, made in memory."""

from __future__ import annotations

import io

from PIL import Image


def image_bytes(colour: str = "red", size: tuple[int, int] = (64, 48), fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


NOT_AN_IMAGE = b"this is not an image"
