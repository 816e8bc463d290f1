"""Near-duplicate recall and false positives per Hamming radius, and the index's speed.

    .venv/bin/python benchmarks/bench_near_dup.py                 # 150 photos, index on 1M hashes
    .venv/bin/python benchmarks/bench_near_dup.py --n 300 --max-radius 12 --index-n 2000000

Quality: N distinct 1-2 MP photo JPEGs (benchmarks/photos.py, derived from the photos bundled
with scikit-image). Each gets copies that should collide (JPEG re-encodes at q85 and q75, 50 %
and 25 % Lanczos downscales, a 2 % crop: 1 % off every side) and negatives that must not (a
horizontal flip, which PRX keeps as a different training image, and every other photo).
Everything is hashed with the project's phash (``prx_data.imaging.phash.phash_bytes``) and,
for each radius k, the table shows the share of copies within k of their original (recall)
and the share of negative pairs within k (false positives). Distinct photos are derived from
a handful of source photos with random crops, so some pairs are overlapping crops of one
scene; they are counted separately ("same scene").

Speed: ``cluster_ids`` (multi-index hashing) on ``--index-n`` random hashes per radius, in
seconds per million hashes, and both it and the brute-force pair scan on ``--brute-n`` hashes
in the same run (median of ``--repeats``), with their ratio; the scan's cost at ``--index-n``
is extrapolated (it grows as n^2; running it would take hours).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.photos import DEFAULT_CACHE, make_photo_jpegs, source_photos  # noqa: E402
from prx_data.imaging.hash_index import auto_blocks, brute_force_pairs, cluster_ids, hamming  # noqa: E402
from prx_data.imaging.phash import phash_bytes  # noqa: E402

POSITIVES = ("q85", "q75", "half", "quarter", "crop2")
NEGATIVES = ("flip",)


def _encode(image: Image.Image, quality: int) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def variants(path: Path) -> dict[str, bytes]:
    original = path.read_bytes()
    with Image.open(io.BytesIO(original)) as opened:
        img = opened.convert("RGB")
        w, h = img.size
        dx, dy = max(1, round(w * 0.01)), max(1, round(h * 0.01))
        return {
            "original": original,
            "q85": _encode(img, 85),
            "q75": _encode(img, 75),
            "half": _encode(img.resize((w // 2, h // 2), Image.Resampling.LANCZOS), 90),
            "quarter": _encode(img.resize((w // 4, h // 4), Image.Resampling.LANCZOS), 90),
            "crop2": _encode(img.crop((dx, dy, w - dx, h - dy)), 90),
            "flip": _encode(img.transpose(Image.Transpose.FLIP_LEFT_RIGHT), 90),
        }


def _scene_of(index: int) -> int:
    # make_photo cycles through the bundled photos by index.
    return index % len(source_photos())


def quality_table(paths: list[Path], max_radius: int) -> dict:
    hashes: dict[str, list[int]] = {}
    for path in paths:
        for kind, data in variants(path).items():
            hashes.setdefault(kind, []).append(phash_bytes(data))
    arr = {k: np.array(v, np.int64).view(np.uint64) for k, v in hashes.items()}
    dist = {kind: hamming(arr["original"], arr[kind]) for kind in POSITIVES + NEGATIVES}
    n = len(paths)
    i, j = np.triu_indices(n, 1)
    pair_dist = hamming(arr["original"][i], arr["original"][j])
    scenes = np.array([_scene_of(k) for k in range(n)])
    same_scene = scenes[i] == scenes[j]
    rows = []
    for k in range(max_radius + 1):
        row: dict[str, float] = {"k": k}

        for kind in POSITIVES:
            row[kind] = float(np.mean(dist[kind] <= k))
        row["flip_fp"] = float(np.mean(dist["flip"] <= k))
        row["distinct_fp_pairs"] = int(np.sum((pair_dist <= k) & ~same_scene))
        row["same_scene_fp_pairs"] = int(np.sum((pair_dist <= k) & same_scene))
        rows.append(row)
    return {
        "rows": rows,
        "n": n,
        "distinct_pairs": int(np.sum(~same_scene)),
        "same_scene_pairs": int(np.sum(same_scene)),
        "median_dist": {kind: float(np.median(d)) for kind, d in dist.items()},
        "min_distinct": int(pair_dist[~same_scene].min()) if (~same_scene).any() else None,
        "min_same_scene": int(pair_dist[same_scene].min()) if same_scene.any() else None,
    }


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed_table(index_n: int, brute_n: int, radii: list[int], repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    big = rng.integers(-(2**63), 2**63 - 1, index_n, dtype=np.int64)
    small = big[:brute_n]
    rows = []
    for k in radii:
        t_index_small = _median_time(lambda k=k: cluster_ids(small, k), repeats)
        t_brute_small = _median_time(lambda k=k: brute_force_pairs(small, k), 1 if brute_n > 5000 else repeats)
        t_index_big = _median_time(lambda k=k: cluster_ids(big, k), 1)
        rows.append(
            {
                "k": k,
                "blocks": auto_blocks(index_n, k),
                "index_s_per_M": t_index_big / (index_n / 1e6),
                "index_small_s": t_index_small,
                "brute_small_s": t_brute_small,
                "speedup": t_brute_small / t_index_small,
                # Pairs grow as n^2: what the scan would cost on the big set, per million hashes.
                "brute_s_per_M_extrapolated": t_brute_small * (index_n / brute_n) ** 2 / (index_n / 1e6),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150, help="distinct photos")
    parser.add_argument("--max-radius", type=int, default=10)
    parser.add_argument("--index-n", type=int, default=1_000_000)
    parser.add_argument("--brute-n", type=int, default=20_000)
    parser.add_argument("--speed-radii", default="0,1,2,3,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)

    paths = make_photo_jpegs(args.n, args.folder)
    q = quality_table(paths, args.max_radius)
    print(f"# near-duplicate quality: {q['n']} photos, phash distance to the original")
    print("median distance: " + ", ".join(f"{k} {v:g}" for k, v in q["median_dist"].items()))
    print(f"closest distinct pair: {q['min_distinct']} bits; closest same-scene pair: {q['min_same_scene']} bits")
    header = [
        "k",
        *[f"{p} recall" for p in POSITIVES],
        "flip FP",
        f"distinct FP pairs /{q['distinct_pairs']}",
        f"same-scene FP /{q['same_scene_pairs']}",
    ]
    print(" | ".join(header))
    for row in q["rows"]:
        cells = [
            str(row["k"]),
            *[f"{row[p]:.1%}" for p in POSITIVES],
            f"{row['flip_fp']:.1%}",
            str(row["distinct_fp_pairs"]),
            str(row["same_scene_fp_pairs"]),
        ]
        print(" | ".join(cells))

    radii = [int(r) for r in args.speed_radii.split(",") if r.strip()]
    print(f"\n# index speed: cluster_ids on {args.index_n:,} random hashes; brute force vs index on {args.brute_n:,}")
    print(
        "k | blocks | index s per 1M hashes | brute force s per 1M (extrapolated n^2) | index s (small) | brute force s (small) | speed-up (small)"
    )
    for row in speed_table(args.index_n, args.brute_n, radii, args.repeats):
        print(
            f"{row['k']} | {row['blocks']} | {row['index_s_per_M']:.2f} | {row['brute_s_per_M_extrapolated']:.0f} | {row['index_small_s']:.3f} | "
            f"{row['brute_small_s']:.2f} | {row['speedup']:.0f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
