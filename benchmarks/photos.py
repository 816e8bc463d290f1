"""Distinct, photo-like JPEGs made offline from the photos that ship inside scikit-image.

Benchmarks and tests need many *real* photos (smooth skies, skin, fur, gravel...) rather than
noise or gradients, because decode, resize, JPEG and perceptual-hash costs and behaviour depend
on image content. Nothing may be downloaded, so every image is derived from the handful of
photos bundled with ``skimage.data`` (and scikit-learn's two sample images when it is
installed): each output takes its own random crop, flip, size, colour jitter and sensor grain,
so no two files are the same picture.

    from benchmarks.photos import make_photo_jpegs
    paths = make_photo_jpegs(200, Path("benchmarks/_cache/photos"))

Files are cached by name (generator version, source set, seed, index), so repeated runs reuse
them. Which photos exist depends on whether scikit-learn is installed (its two sample images join
the source set and shift every index), hence the source-set tag in the names.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

# Bumped whenever the synthesis changes, so stale cached files are never mistaken for new ones.
GENERATOR_VERSION = "v1"
DEFAULT_CACHE = Path(__file__).resolve().parent / "_cache" / "photos"

# Photos (not diagrams, text or microscopy renderings) bundled in the scikit-image wheel; the
# ones that need the optional `pooch` download are left out on purpose.
_COLOR_PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "stereo_motorcycle",
)
_GRAY_PHOTOS = ("camera", "coins", "moon", "grass", "gravel", "brick", "clock")


def _skimage_loader(name: str) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        import skimage.data

        array = getattr(skimage.data, name)()
        if isinstance(array, tuple):  # stereo_motorcycle returns (left, right, disparity)
            array = array[0]
        return np.asarray(array)

    return load


@lru_cache(maxsize=1)
def source_photos() -> tuple[tuple[str, np.ndarray], ...]:
    """(name, HxWx3 uint8 RGB) for every bundled photo that loads offline."""
    photos: list[tuple[str, np.ndarray]] = []
    for name in _COLOR_PHOTOS + _GRAY_PHOTOS:
        try:
            array = _skimage_loader(name)()
        except Exception:  # a photo missing from this scikit-image build is simply skipped
            continue
        if array.ndim == 2:
            array = np.stack([array] * 3, axis=-1)
        photos.append((name, np.ascontiguousarray(array[..., :3].astype(np.uint8))))
    try:
        from sklearn.datasets import load_sample_images

        for name, array in zip(("china", "flower"), load_sample_images().images, strict=False):
            photos.append((f"sklearn_{name}", np.asarray(array, dtype=np.uint8)))
    except Exception:  # scikit-learn is optional
        pass
    if not photos:
        raise RuntimeError("no bundled photos found: install scikit-image")
    return tuple(photos)


def make_photo(
    index: int,
    seed: int = 0,
    megapixels: tuple[float, float] = (1.0, 2.0),
) -> Image.Image:
    """One distinct photo-like RGB image, deterministic in (index, seed, megapixels)."""
    photos = source_photos()
    rng = np.random.default_rng([seed, index, 0x9E37])
    name, array = photos[index % len(photos)]
    h, w = array.shape[:2]

    # Crop: 55-100 % of each side, anywhere in the frame.
    ch = int(h * rng.uniform(0.55, 1.0))
    cw = int(w * rng.uniform(0.55, 1.0))
    # Keep the crop inside 0.55..1.8 aspect so the result is an ordinary photo shape.
    cw = min(w, int(np.clip(cw, ch * 0.55, ch * 1.8)))
    y0 = int(rng.integers(0, h - ch + 1))
    x0 = int(rng.integers(0, w - cw + 1))
    crop = array[y0 : y0 + ch, x0 : x0 + cw].astype(np.float32)

    # Colour jitter: per-channel gain, brightness, contrast, saturation, gamma. Grey sources
    # get a random tint this way too, so they become distinct colour photos.
    gray_source = name in _GRAY_PHOTOS
    gains = rng.uniform(0.8, 1.2, size=3) if gray_source else rng.uniform(0.92, 1.08, size=3)
    crop = crop * gains
    luma = crop @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    saturation = rng.uniform(0.7, 1.3)
    crop = luma[..., None] + (crop - luma[..., None]) * saturation
    contrast = rng.uniform(0.85, 1.15)
    crop = (crop - 128.0) * contrast + 128.0 + rng.uniform(-15, 15)
    gamma = rng.uniform(0.85, 1.15)
    crop = 255.0 * (np.clip(crop, 0, 255) / 255.0) ** gamma

    image = Image.fromarray(np.clip(crop + 0.5, 0, 255).astype(np.uint8), "RGB")
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)

    # Size: uniform in the megapixel range, aspect of the crop give or take 8 %.
    aspect = (cw / ch) * rng.uniform(0.92, 1.08)
    pixels = rng.uniform(*megapixels) * 1e6
    out_w = max(16, int(np.sqrt(pixels * aspect)))
    out_h = max(16, int(pixels / out_w))
    image = image.resize((out_w, out_h), Image.Resampling.LANCZOS)

    # Upscaled bundled photos are too smooth to behave like camera files: restore some edge
    # contrast and add sensor grain so JPEG sizes and decode costs look like real photos.
    image = image.filter(ImageFilter.UnsharpMask(radius=2, percent=int(rng.uniform(40, 120))))
    grain = rng.normal(0.0, rng.uniform(1.5, 4.0), size=(out_h, out_w, 1)).astype(np.float32)
    pixels_arr = np.asarray(image, dtype=np.float32) + grain
    return Image.fromarray(np.clip(pixels_arr + 0.5, 0, 255).astype(np.uint8), "RGB")


def source_tag() -> str:
    """Short id of the source set: whether scikit-learn is installed changes every photo."""
    names = ",".join(name for name, _ in source_photos())
    return hashlib.sha1(names.encode()).hexdigest()[:6]


def make_photo_jpegs(n: int, folder: Path, seed: int = 0) -> list[Path]:
    """Write (or reuse) ``n`` distinct 1-2 MP photo-like JPEGs in ``folder``; return their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    tag = source_tag()
    for index in range(n):
        path = folder / f"photo_{GENERATOR_VERSION}_{tag}_s{seed}_{index:05d}.jpg"
        if not path.exists():
            rng = np.random.default_rng([seed, index, 0x51])
            quality = int(rng.integers(85, 96))
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # one per process: runs may overlap
            make_photo(index, seed).save(tmp, format="JPEG", quality=quality)
            tmp.replace(path)  # atomic: a concurrent or interrupted run never sees half a file
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    paths = make_photo_jpegs(args.n, args.folder, args.seed)
    total = sum(p.stat().st_size for p in paths)
    print(f"{len(paths)} JPEGs in {args.folder} ({total / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
