"""Helpers for the imaging tests: real photos made offline, encoders, PSNR."""

from __future__ import annotations

import importlib.util
import io
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import numpy as np
from PIL import Image

_PHOTOS_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "photos.py"


@lru_cache(maxsize=1)
def photos_module() -> ModuleType:
    """benchmarks/photos.py, loaded by path: benchmarks/ is not an importable package, and
    tests and benchmarks must use the same photos."""
    spec = importlib.util.spec_from_file_location("prx_benchmark_photos", _PHOTOS_PY)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def photo(index: int, seed: int = 0, megapixels: tuple[float, float] = (0.3, 0.6)) -> Image.Image:
    return photos_module().make_photo(index, seed, megapixels)


def jpeg_bytes(image: Image.Image, quality: int = 92, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality, **options)
    return buffer.getvalue()


def png_bytes(image: Image.Image, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", **options)
    return buffer.getvalue()


def psnr(a: Image.Image, b: Image.Image) -> float:
    x = np.asarray(a.convert("RGB"), dtype=np.float64)
    y = np.asarray(b.convert("RGB"), dtype=np.float64)
    mse = float(np.mean((x - y) ** 2))
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))
