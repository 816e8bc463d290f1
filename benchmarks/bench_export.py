"""Export throughput per core on 1-2 MP JPEGs, end to end, with the cost split.

    .venv/bin/python -m benchmarks.bench_export --n 200 --repeats 3

One process, CPU seconds (``time.process_time``), medians over repeats. Stages, as the export
runs them (``prx_data.stages.export_stage``): read bytes, decode (reduced JPEG decode where the
bucket allows, ``decode.load_pixels``), resize (Lanczos cover + crop), encode (JPEG q92), and
write (``export.mds_writer.write_partition`` into a fresh MDS tree, commit included). Baseline:
the naive path (full decode, ``Image.resize`` straight to the bucket shape with LANCZOS,
``save(quality=92)``) with the same MDS write. Ray spreads the prepare step over cores; the
write runs in the driver, so its share bounds the speed-up from adding cores.

Colour: the same photos converted by ``ImageCms`` into Display P3 and Adobe RGB (1998) with
the profile embedded (``prx_data.demo.icc`` builds both profiles), then ``prepare`` on each set:
CPU ms per source megapixel with and without a profile, the conversion's extra cost, and what
that adds to a corpus where a given share of images carries a non-sRGB profile. Images without
a profile (or with an sRGB one) take the unchanged path, so the plain figure is the baseline.
"""

from __future__ import annotations

import argparse
import io
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageCms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.photos import DEFAULT_CACHE, make_photo_jpegs  # noqa: E402
from prx_data.demo.icc import adobe_rgb_profile, convert_photo, display_p3_profile, encode_with_profile  # noqa: E402
from prx_data.export.mds_writer import write_partition  # noqa: E402
from prx_data.imaging.buckets import Assignment, Drop, assign  # noqa: E402
from prx_data.imaging.decode import load_pixels, picture_box, read_header  # noqa: E402
from prx_data.imaging.transform import encode_jpeg, prepare, resize_cover_crop  # noqa: E402


def _sample(i: int, jpeg: bytes, target: Assignment, w: int, h: int) -> dict:
    return {
        "image": jpeg,
        "tier": target.tier,
        "height": target.height,
        "width": target.width,
        "original_width": w,
        "original_height": h,
        "caption": "a caption",
        "sample_id": f"{i:032x}",
    }


def split(paths: list[Path], root: Path) -> dict[str, float]:
    """CPU seconds per stage of the real path, measured stage by stage on every image."""
    cost = dict.fromkeys(("read", "decode", "resize", "encode", "write"), 0.0)
    samples = []
    for i, path in enumerate(paths):
        t0 = time.process_time()
        data = path.read_bytes()
        t1 = time.process_time()
        header = read_header(data)
        target = assign(header.width, header.height)
        assert isinstance(target, Assignment)
        scale = max(target.width / header.width, target.height / header.height)
        pixels = load_pixels(header, "RGB", (math.ceil(header.width * scale), math.ceil(header.height * scale)))
        t2 = time.process_time()
        resized = resize_cover_crop(pixels, target.height, target.width, picture_box(header, pixels))
        t3 = time.process_time()
        jpeg = encode_jpeg(resized)
        t4 = time.process_time()
        cost["read"] += t1 - t0
        cost["decode"] += t2 - t1
        cost["resize"] += t3 - t2
        cost["encode"] += t4 - t3
        samples.append(_sample(i, jpeg, target, header.width, header.height))
    t5 = time.process_time()
    write_partition(samples, mds_root=str(root), source="bench", allow_empty=False)
    cost["write"] = time.process_time() - t5
    return cost


def ours(paths: list[Path], root: Path) -> float:
    t0 = time.process_time()

    def gen():
        for i, path in enumerate(paths):
            p = prepare(path.read_bytes())
            assert not isinstance(p, Drop)
            yield _sample(i, p.jpeg, Assignment(p.tier, p.height, p.width), p.original_width, p.original_height)

    write_partition(gen(), mds_root=str(root), source="bench")
    return time.process_time() - t0


def naive(paths: list[Path], root: Path) -> float:
    t0 = time.process_time()

    def gen():
        for i, path in enumerate(paths):
            image = Image.open(path).convert("RGB")
            target = assign(*image.size)
            buffer = io.BytesIO()
            assert isinstance(target, Assignment)
            image.resize((target.width, target.height), Image.Resampling.LANCZOS).save(buffer, format="JPEG", quality=92)
            yield _sample(i, buffer.getvalue(), target, *image.size)

    write_partition(gen(), mds_root=str(root), source="bench")
    return time.process_time() - t0


# Share of a corpus whose images carry an ICC profile, and of them Adobe RGB, as counted on 237
# real photos (77 with a profile, 4 Adobe RGB); how many of the 77 are sRGB profiles (which take
# the plain path) was not counted, so the profiled share is an upper bound on what is converted.
CORPUS_PROFILED_SHARE = 77 / 237


def profiled_sets(paths: list[Path]) -> dict[str, list[bytes]]:
    """The photos re-encoded as a camera or phone would write them (JPEG q95): without a
    profile, with an sRGB one (both the plain path), and converted into Display P3 and Adobe RGB
    with that profile embedded."""
    photos = [Image.open(p).convert("RGB") for p in paths]
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    sets: dict[str, list[bytes]] = {"no profile": [], "srgb": []}
    for photo in photos:
        buffer = io.BytesIO()
        photo.save(buffer, format="JPEG", quality=95)
        sets["no profile"].append(buffer.getvalue())
        sets["srgb"].append(encode_with_profile(photo, srgb, quality=95))
    for name, profile in (("display-p3", display_p3_profile()), ("adobe-rgb", adobe_rgb_profile())):
        sets[name] = [encode_with_profile(convert_photo(photo, profile), profile, quality=95) for photo in photos]
    return sets


def prepare_cost(images: list[bytes]) -> float:
    t0 = time.process_time()
    for data in images:
        prepare(data)
    return time.process_time() - t0


def colour(paths: list[Path], repeats: int) -> None:
    sets = profiled_sets(paths)
    megapixels = sum(Image.open(p).width * Image.open(p).height for p in paths) / 1e6
    cost = {name: statistics.median(prepare_cost(images) for _ in range(repeats)) for name, images in sets.items()}
    plain = cost["no profile"]
    print(f"colour: prepare (decode, sRGB conversion, resize, encode) on {len(paths)} photos, {megapixels:.0f} MP, medians of {repeats}")
    for name, seconds in cost.items():
        extra = f"   {1000 * (seconds - plain) / megapixels:+6.2f} ms/MP, {seconds / plain:.2f}x" if name != "no profile" else ""
        print(f"  {name:<11} {1000 * seconds / megapixels:6.2f} ms/MP{extra}")
    worst = max(cost[n] for n in ("display-p3", "adobe-rgb")) / plain - 1
    print(
        f"  corpus: at most {100 * CORPUS_PROFILED_SHARE:.0f} % of images carry a profile (77 of 237 real photos): "
        f"export CPU +{100 * CORPUS_PROFILED_SHARE * worst:.1f} % at most"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--colour-only", action="store_true", help="only the colour-conversion figures")
    args = parser.parse_args(argv)
    paths = make_photo_jpegs(args.n, DEFAULT_CACHE)
    if args.colour_only:
        colour(paths, args.repeats)
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-export-"))
    base_t, our_t, splits = [], [], []
    for r in range(args.repeats):
        base_t.append(naive(paths, work / f"naive{r}"))
        our_t.append(ours(paths, work / f"ours{r}"))
        splits.append(split(paths, work / f"split{r}"))
    shutil.rmtree(work, ignore_errors=True)
    b, o = statistics.median(base_t), statistics.median(our_t)
    n = len(paths)
    print(f"{n} photos, 1-2 MP JPEG, default tiers, one process (per core), medians of {args.repeats}")
    print(f"naive decode+resize+q92 + MDS write: {n / b:7.1f} images/s")
    print(f"prx-data prepare + MDS write:        {n / o:7.1f} images/s   ratio {b / o:.2f}x")
    stage = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
    total = sum(stage.values())
    print("cost split of the real path (ms per image, share):")
    for key, value in stage.items():
        print(f"  {key:<7} {1000 * value / n:7.2f} ms  {100 * value / total:5.1f} %")
    colour(paths, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
