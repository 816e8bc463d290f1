"""A JSONL source of many one-record files: time and peak RSS of the listing and of the first
ingest, for two code trees (the shipped tree against ``--old-tree``, e.g. one from before small
files were grouped into units).

``--n`` files of one line each under a glob, each line naming an image file that does not
exist (cheap rows: no image work, so what is measured is the per-file cost). A fresh
subprocess per (tree, phase) runs, from that tree, either ``list_units`` over the source (the
driver's listing and planning) or ``ingest_source`` (listing, reading, the table commit and the
unit manifest), and reports its wall time and its peak RSS above the process's after imports
(with the CLI's cap of two malloc arenas). Figures are medians of ``--repeats`` runs, with the
ratio old / new measured in the same run.

    git worktree add /tmp/old-tree <old commit>
    .venv/bin/python benchmarks/bench_many_files.py --old-tree /tmp/old-tree [--n 20000] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from peak_rss import PRELUDE, run_in_tree

CHILD = (
    PRELUDE
    + r"""
import json, sys, time
from pathlib import Path
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.plan.unit_listing import list_units
from prx_data.ingest.registry import RegisteredSource, SourceSpec
# What is measured starts after the imports (lance, pyarrow: ~150 MB, the same in both trees).
base = _status("VmRSS")
_peak[0] = base
phase, folder, uri = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
spec = SourceSpec(name="many", shape="jsonl", location=str(folder / "lines" / "**" / "*.jsonl"), root=str(folder),
                  fields={"key": "id", "image": "image", "image_kind": "path", "caption": "caption"})
source = RegisteredSource(spec, folder / "many.yaml")
started = time.perf_counter()
if phase == "listing":
    units = sum(1 for _ in list_units(source))
    rows = None
else:
    stats = ingest_source(source, uri)
    units, rows = stats.units, stats.rows
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "peak_mb": (peak_kb() - base) / 1024, "units": units, "rows": rows}))
"""
)


def make_source(folder: Path, n: int) -> None:
    for i in range(n):
        sub = folder / "lines" / f"{i // 1000:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        record = {"id": f"k{i}", "image": f"missing/{i}.jpg", "caption": f"a caption for record number {i}"}
        (sub / f"{i:07d}.jsonl").write_text(json.dumps(record) + "\n")


def measure(tree: str, phase: str, folder: Path, repeats: int) -> dict:
    runs = []
    for r in range(repeats):
        uri = str(folder / f"t-{os.getpid()}-{abs(hash(tree))}-{phase}-{r}.lance")
        runs.append(run_in_tree(tree, CHILD, phase, str(folder), uri))
    return {
        "seconds": statistics.median(x["seconds"] for x in runs),
        "peak_mb": statistics.median(x["peak_mb"] for x in runs),
        "units": runs[0]["units"],
        "rows": runs[0]["rows"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old-tree", required=True, help="a checkout of the code to compare against")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    new_tree = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory(prefix="bench-many-files-") as tmp:
        folder = Path(tmp)
        make_source(folder, args.n)
        print(f"{args.n} one-record JSONL files, medians of {args.repeats} run(s)")
        for phase in ("listing", "ingest"):
            old = measure(args.old_tree, phase, folder, args.repeats)
            new = measure(new_tree, phase, folder, args.repeats)
            for name, fig in (("old", old), ("new", new)):
                per_file_ms = fig["seconds"] / args.n * 1000
                print(
                    f"{phase:8s} {name}: {fig['seconds']:7.2f} s ({per_file_ms:.3f} ms/file), peak +{fig['peak_mb']:7.1f} MB, "
                    f"units={fig['units']} rows={fig['rows']}"
                )
            ratio_t = old["seconds"] / max(new["seconds"], 1e-9)
            ratio_m = old["peak_mb"] / max(new["peak_mb"], 1e-9)
            print(f"{phase:8s} old/new: time x{ratio_t:.1f}, peak RSS x{ratio_m:.1f}")


if __name__ == "__main__":
    main()
