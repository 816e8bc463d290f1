"""Reproduce the JPEG q92 measurement on any folder of images.

The PRX recipe stores training images as JPEG quality 92 because it is visually lossless,
survives repeated re-encoding, and is several times smaller than PNG. This measures those three
claims on your own images: PSNR after 1 and after 10 decode/encode cycles at the quality, and
the JPEG/PNG size ratio, per resolution band (0.25-0.5 MP, 1-2 MP, "other").

    prx-data jpeg-study FOLDER            # once wired into the CLI
    python -m prx_data.imaging.jpeg_study FOLDER
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from prx_data.imaging.decode import DEFAULT_MAX_PIXELS, DecodeError, open_image
from prx_data.imaging.transform import JPEG_QUALITY, encode_jpeg

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif"})
# Bands in megapixels (10^6 pixels), both ends included; everything else is "other".
BANDS: tuple[tuple[str, float, float], ...] = (("0.25-0.5 MP", 0.25, 0.5), ("1-2 MP", 1.0, 2.0))
OTHER = "other"


@dataclass(frozen=True)
class ImageMeasure:
    path: str
    width: int
    height: int
    psnr_first: float  # dB after one encode/decode cycle (inf when lossless)
    psnr_last: float  # dB after ``cycles`` cycles, always against the original pixels
    jpeg_size: int  # bytes of the first encode
    png_size: int

    @property
    def megapixels(self) -> float:
        return self.width * self.height / 1e6

    @property
    def band(self) -> str:
        return band_of(self.width * self.height)


@dataclass
class StudyReport:
    quality: int
    cycles: int
    measures: list[ImageMeasure] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, reason: message)


def band_of(pixels: int) -> str:
    megapixels = pixels / 1e6
    for name, low, high in BANDS:
        if low <= megapixels <= high:
            return name
    return OTHER


def psnr(reference: np.ndarray, other: np.ndarray) -> float:
    """PSNR in dB over all RGB samples (8-bit peak)."""
    mse = float(np.mean((reference.astype(np.float64) - other.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def measure_image(
    data: bytes,
    path: str = "",
    quality: int = JPEG_QUALITY,
    cycles: int = 10,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> ImageMeasure:
    """Measure one image; raises ``DecodeError`` when it cannot be decoded."""
    original = open_image(data, max_pixels)
    reference = np.asarray(original)
    png = io.BytesIO()
    original.save(png, format="PNG")
    current = original
    first_jpeg = b""
    psnr_first = math.nan
    for cycle in range(1, cycles + 1):
        encoded = encode_jpeg(current, quality)
        current = Image.open(io.BytesIO(encoded)).convert("RGB")
        if cycle == 1:
            first_jpeg, psnr_first = encoded, psnr(reference, np.asarray(current))
    psnr_last = psnr(reference, np.asarray(current))
    return ImageMeasure(path, original.width, original.height, psnr_first, psnr_last, len(first_jpeg), png.tell())


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def study(
    paths: Iterable[Path],
    quality: int = JPEG_QUALITY,
    cycles: int = 10,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> StudyReport:
    report = StudyReport(quality, cycles)
    for path in paths:
        try:
            report.measures.append(measure_image(path.read_bytes(), str(path), quality, cycles, max_pixels))
        except DecodeError as exc:
            report.errors.append((str(path), str(exc)))
        except OSError as exc:  # unreadable file: reported, never fatal
            report.errors.append((str(path), f"unreadable: {exc}"))
    return report


def format_table(report: StudyReport) -> str:
    headers = (
        "band",
        "images",
        f"PSNR 1x q{report.quality}",
        f"PSNR {report.cycles}x",
        "loss 1x->Nx",
        "JPEG/PNG size",
        "JPEG bits/px",
    )
    rows = [headers]
    for name in [b[0] for b in BANDS] + [OTHER]:
        group = [m for m in report.measures if m.band == name]
        if not group:
            rows.append((name, "0", "-", "-", "-", "-", "-"))
            continue
        first = _median([m.psnr_first for m in group])
        last = _median([m.psnr_last for m in group])
        ratio = _median([m.jpeg_size / m.png_size for m in group])
        bpp = _median([8 * m.jpeg_size / (m.width * m.height) for m in group])
        rows.append(
            (
                name,
                str(len(group)),
                f"{first:.2f} dB",
                f"{last:.2f} dB",
                f"{first - last:.2f} dB",
                f"{ratio:.3f} (1/{1 / ratio:.1f})",
                f"{bpp:.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"medians per image; PSNR over RGB against the decoded original; {len(report.errors)} file(s) not decodable")
    return "\n".join(lines)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="prx-data jpeg-study",
        description="PSNR after 1 and N JPEG cycles and JPEG/PNG size ratio, per resolution band.",
    )
    parser.add_argument("folder", type=Path, help="folder of images (searched recursively)")
    parser.add_argument("--quality", type=int, default=JPEG_QUALITY)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--limit", type=int, default=None, help="measure at most this many files")
    parser.add_argument("--max-pixels", type=int, default=DEFAULT_MAX_PIXELS)
    parser.add_argument("--verbose", action="store_true", help="also list undecodable files")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"not a folder: {args.folder}")
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    paths = image_files(args.folder)[: args.limit]
    report = study(paths, args.quality, args.cycles, args.max_pixels)
    print(f"{len(paths)} image file(s) in {args.folder}")
    print(format_table(report))
    if args.verbose:
        for path, reason in report.errors:
            print(f"  skipped {path}: {reason}")
    return 0 if report.measures or not paths else 1


if __name__ == "__main__":
    sys.exit(main())
