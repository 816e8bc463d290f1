"""Image core throughput per CPU core, against the obvious baselines.

    .venv/bin/python benchmarks/bench_image_core.py            # 200 photos, 3 repeats
    .venv/bin/python benchmarks/bench_image_core.py --n 500 --repeats 5

On the same N distinct 1-2 MP photo JPEGs (benchmarks/photos.py), single process:

- hash: ``phash_bytes(path.read_bytes())`` vs ``imagehash.phash(Image.open(path))``
  (target: 4x the images/s).
- export: ``prepare(path.read_bytes())`` (bucket, resize, JPEG q92) vs the naive path: full
  decode, ``Image.resize`` straight to the bucket shape with LANCZOS, save at quality 92
  (target: 1.5x); once with the default tiers and once with a 512-only config, where the
  downscale is large enough for the reduced JPEG decode to apply.

Times are CPU seconds of this process (``time.process_time``), so images/s is per core and
other work on a shared machine disturbs it less than wall time; medians over repeats, with
baseline and candidate interleaved in each repeat. Decode-only floors are printed as well: a
hash cannot be cheaper than the reduced decode it needs.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import imagehash
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.photos import DEFAULT_CACHE, make_photo_jpegs  # noqa: E402
from prx_data.imaging.buckets import Assignment, BucketConfig, assign  # noqa: E402
from prx_data.imaging.decode import open_for_hash  # noqa: E402
from prx_data.imaging.phash import phash_bytes  # noqa: E402
from prx_data.imaging.transform import Prepared, prepare  # noqa: E402

HASH_TARGET = 4.0
EXPORT_TARGET = 1.5


def baseline_hash(path: Path) -> object:
    return imagehash.phash(Image.open(path))


def our_hash(path: Path) -> object:
    return phash_bytes(path.read_bytes())


def baseline_export(path: Path) -> bytes:
    image = Image.open(path)
    target = assign(*image.size)
    assert isinstance(target, Assignment)
    buffer = io.BytesIO()
    image.resize((target.width, target.height), Image.Resampling.LANCZOS).save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def our_export(path: Path) -> bytes:
    result = prepare(path.read_bytes())
    assert isinstance(result, Prepared), result
    return result.jpeg


# With the default tiers a 1-2 MP photo goes to the 1024 tier (scale 0.71-1.0), where no
# reduced JPEG decode is possible and the Lanczos resample dominates. A 512-only config (e.g. a
# low-resolution training phase) downscales by >= 2x, where the reduced decode applies.
LOW_RES = BucketConfig(tiers=(512,))


def baseline_export_512(path: Path) -> bytes:
    image = Image.open(path)
    target = assign(*image.size, LOW_RES)
    assert isinstance(target, Assignment)
    buffer = io.BytesIO()
    image.resize((target.width, target.height), Image.Resampling.LANCZOS).save(buffer, format="JPEG", quality=92)
    return buffer.getvalue()


def our_export_512(path: Path) -> bytes:
    result = prepare(path.read_bytes(), LOW_RES)
    assert isinstance(result, Prepared), result
    return result.jpeg


def decode_full(path: Path) -> object:
    image = Image.open(path)
    image.load()
    return image


def decode_hash_draft(path: Path) -> object:
    image = Image.open(path)
    image.draft("L", (64, 64))
    image.load()
    return image


def decode_hash_checked(path: Path) -> object:
    """The hash's decode: the same pixels as the draft decode, every scan checked."""
    return open_for_hash(path.read_bytes())


def cpu_seconds(function: Callable[[Path], object], paths: list[Path]) -> float:
    start = time.process_time()
    for path in paths:
        function(path)
    return time.process_time() - start


def measure(groups: dict[str, Callable[[Path], object]], paths: list[Path], repeats: int) -> dict[str, float]:
    """Median images/s per core for each function, interleaved so noise hits all alike."""
    for function in groups.values():  # warm-up: imports, caches, page cache
        function(paths[0])
    seconds: dict[str, list[float]] = {name: [] for name in groups}
    for _ in range(repeats):
        for name, function in groups.items():
            seconds[name].append(cpu_seconds(function, paths))
    return {name: len(paths) / statistics.median(values) for name, values in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Image core throughput vs baselines.")
    parser.add_argument("--n", type=int, default=200, help="number of 1-2 MP photo JPEGs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)

    paths = make_photo_jpegs(args.n, args.folder, args.seed)
    sizes = [Image.open(p).size for p in paths]
    megapixels = [w * h / 1e6 for w, h in sizes]
    bits = [8 * p.stat().st_size / (w * h) for p, (w, h) in zip(paths, sizes, strict=True)]
    print(
        f"{len(paths)} photo JPEGs, {min(megapixels):.2f}-{max(megapixels):.2f} MP "
        f"(median {statistics.median(megapixels):.2f}), median {statistics.median(bits):.2f} "
        f"bits/pixel; {args.repeats} repeats; images/s per core (CPU time), medians"
    )

    hashing = measure(
        {
            "imagehash.phash(Image.open(path))": baseline_hash,
            "phash_bytes(path.read_bytes())": our_hash,
            "floor: full decode only": decode_full,
            "floor: draft('L', 64) decode only": decode_hash_draft,
            "open_for_hash: same, every scan checked": decode_hash_checked,
        },
        paths,
        args.repeats,
    )
    exporting = measure(
        {
            "naive: decode, resize LANCZOS, save q92": baseline_export,
            "prepare(path.read_bytes())": our_export,
        },
        paths,
        args.repeats,
    )

    def show(title: str, rates: dict[str, float], target: float) -> bool:
        names = list(rates)
        baseline, ours = rates[names[0]], rates[names[1]]
        ratio = ours / baseline
        print(f"\n{title}")
        for name in names:
            print(f"  {name:42s} {rates[name]:8.1f} img/s  ({1000 / rates[name]:6.2f} ms)")
        verdict = "meets" if ratio >= target else "MISSES"
        print(f"  ratio {ratio:.2f}x (target {target:g}x: {verdict})")
        return ratio >= target

    low_res = measure(
        {
            "naive: decode, resize LANCZOS, save q92": baseline_export_512,
            "prepare(path.read_bytes(), tiers=(512,))": our_export_512,
        },
        paths,
        args.repeats,
    )

    ok = show("perceptual hash", hashing, HASH_TARGET)
    ceiling = hashing["floor: draft('L', 64) decode only"] / hashing[next(iter(hashing))]
    print(f"  ceiling with this decoder: {ceiling:.2f}x (the reduced decode alone)")
    ok &= show(
        "bucket + resize + JPEG q92 (default tiers: all to the 1024 tier)",
        exporting,
        EXPORT_TARGET,
    )
    show("same, 512-only tiers (downscale >= 2x: reduced decode applies)", low_res, EXPORT_TARGET)
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
