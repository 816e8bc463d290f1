"""The loader's memory and time on a planted skip-list sidecar of 10^7 indices.

Builds one bucket (two sources, a few hundred samples, a few skips) the way the pipeline writes
it, then opens ``make_loader`` over it in a fresh interpreter twice: over the tree as built (the
baseline) and after one sidecar was replaced by one of ``--indices`` indices and sample ids, its
sha256 put in the manifest so only its size gives it away. Prints peak RSS and seconds of each
open (median of ``--repeats``), the error the planted one ends with, and the ratios to the
baseline. ``--old-tree`` runs the same opens from another checkout too (the figures before).

    .venv/bin/python benchmarks/bench_loader_planted_sidecar.py [--indices 10000000] [--old-tree /path/to/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from peak_rss import PRELUDE, run_in_tree  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

OPEN = (
    PRELUDE
    + r"""
import json, sys, time
from streaming.base.util import clean_stale_shared_memory
from prx_data.training.loader import make_loader
clean_stale_shared_memory()
base = _status("VmRSS")
start = time.perf_counter()
error = None
try:
    make_loader(sys.argv[1], batch_size=1, shuffle=False)
except BaseException as exc:
    error = f"{type(exc).__name__}: {str(exc)[:300]}"
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": peak_kb() / 1024, "base_mb": base / 1024, "error": error}))
"""
)


def build(root: str) -> None:
    import pyarrow as pa

    from prx_data.export.corpus_index import merge_all
    from prx_data.export.mds_writer import MdsWriterConfig, write_partition
    from prx_data.export.skiplist import build_skiplists

    rng = np.random.default_rng(0)
    lineages = []
    for source in ("src-a", "src-b"):
        rows = [
            {
                "tier": 512,
                "height": 512,
                "width": 512,
                "image": b"\xff\xd8\xff" + rng.integers(0, 256, 2000, dtype=np.uint8).tobytes(),
                "caption": "a caption",
                "sample_id": f"{source}-{i:06d}",
                "source": source,
                "original_width": 512,
                "original_height": 512,
            }
            for i in range(200)
        ]
        lineages.append(write_partition(rows, mds_root=root, source=source, config=MdsWriterConfig(size_limit=200_000)).lineage)
    lineage = pa.concat_tables(lineages)
    picks = lineage.slice(0, 5).select(["sample_id", "shard", "index_in_shard"])
    build_skiplists(picks.append_column("reason", pa.array(["dedup"] * 5)), root)
    merge_all(root)


def plant(root: str, indices: int) -> str:
    """Replace the bucket's first sidecar by one of ``indices`` entries; returns its path."""
    import hashlib

    bucket = os.path.join(root, "512", "512x512")
    with open(os.path.join(bucket, "skiplists.json")) as handle:
        manifest = json.load(handle)
    entry = manifest["sidecars"][0]
    path = os.path.join(bucket, *entry["path"].split("/"))
    with open(path) as handle:
        sidecar = json.load(handle)
    digest = hashlib.sha256()
    with open(path, "wb") as out:

        def put(text: str) -> None:
            data = text.encode()
            digest.update(data)
            out.write(data)

        head = {k: v for k, v in sidecar.items() if k not in ("indices", "sample_ids", "kept_sample_ids")}
        put(json.dumps(head, separators=(",", ":"))[:-1] + ',"indices":[')
        step = 1_000_000
        for lo in range(0, indices, step):
            put(("," if lo else "") + ",".join(map(str, range(lo, min(indices, lo + step)))))
        put('],"sample_ids":[')
        one = '"' + "0" * 32 + '"'
        for lo in range(0, indices, step):
            put(("," if lo else "") + ",".join([one] * (min(indices, lo + step) - lo)))
        put("]}\n")
    entry["sha256"] = digest.hexdigest()
    with open(os.path.join(bucket, "skiplists.json"), "w") as handle:
        json.dump(manifest, handle, sort_keys=True, separators=(",", ":"))
    return path


def measure(tree: str, root: str, repeats: int) -> dict:
    runs = [run_in_tree(tree, OPEN, root) for _ in range(repeats)]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_mb": statistics.median(r["peak_mb"] for r in runs),
        "error": runs[-1]["error"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--indices", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--old-tree", help="another checkout to measure the same opens with (before)")
    args = parser.parse_args()
    trees = [("this tree", REPO)] + ([("old tree", os.path.abspath(args.old_tree))] if args.old_tree else [])
    with tempfile.TemporaryDirectory(prefix="bench-planted-") as folder:
        root = os.path.join(folder, "mds")
        build(root)
        baseline = {name: measure(tree, root, args.repeats) for name, tree in trees}
        path = plant(root, args.indices)
        print(f"planted sidecar: {os.path.getsize(path) / 1e6:.0f} MB, {args.indices} indices")
        for name, tree in trees:
            repeats = args.repeats if name == "this tree" else 1
            planted = measure(tree, root, repeats)
            base = baseline[name]
            print(
                f"{name}: baseline open {base['seconds']:.2f} s, peak {base['peak_mb']:.0f} MB; "
                f"planted open {planted['seconds']:.2f} s, peak {planted['peak_mb']:.0f} MB "
                f"(x{planted['seconds'] / base['seconds']:.2f} time, x{planted['peak_mb'] / base['peak_mb']:.2f} memory); "
                f"ends with {planted['error']}"
            )


if __name__ == "__main__":
    main()
