"""What the default publication (``min_stream_samples`` 32, folding on, ``fold_max_steps`` 2)
does to the demo corpus: the share of images folded into a neighbour shape, the share left
unpublished (no neighbour in reach: not streamed), and the crop a fold costs (share of the long
side kept: about 0.89 per aspect-grid step, ``imaging.buckets.fold_kept_share``).

The demo corpus is built and ingested for real (every local source, header probe and display
size as ingest records them); each usable image is placed with ``imaging.buckets.assign`` as
export places it, and the fold is planned with the pipeline's own ``curation.fold.plan_folds``.
Skips (dedup, labels, opt-outs) are not applied: they only make buckets sparser, so the figures
are a lower bound on folding for this corpus. The baseline is the old default (1, folding off):
nothing folded, nothing left out, and PRX's device_per_stream reader raises at batch 4.

    .venv/bin/python benchmarks/bench_fold_defaults.py [--min 4 8 16 32 64]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa

from prx_data.curation.fold import FoldPolicy, plan_folds
from prx_data.demo.corpus import build_demo_corpus
from prx_data.export.tree import parse_bucket
from prx_data.imaging.buckets import Assignment, BucketConfig, assign, fold_kept_share, shape_index
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import load_registry


def placements(root: Path) -> pa.Table:
    build_demo_corpus(root)
    registry = load_registry(root / "sources")
    rows = []
    for name, source in sorted(registry.sources.items()):
        if source.spec.shape in ("urls",):  # the remote source needs its HTTP server: left out
            continue
        uri = str(root / "lance" / f"{name}.lance")
        ingest_source(source, uri)
        table = lance.dataset(uri).to_table(columns=["sample_id", "status", "width", "height"], filter="status = 'ok'")
        for sid, w, h in zip(table["sample_id"].to_pylist(), table["width"].to_pylist(), table["height"].to_pylist()):
            placed = assign(w, h)
            if isinstance(placed, Assignment):
                rows.append({"sample_id": sid, "source": name, "tier": placed.tier, "bucket": f"{placed.height}x{placed.width}"})
    table = pa.Table.from_pylist(rows)
    return table.append_column("shard", pa.array([f"s/{i}" for i in range(table.num_rows)])).append_column(
        "index_in_shard", pa.array(range(table.num_rows), pa.int64())
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--min", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64])
    parser.add_argument("--max-steps", type=int, default=2)
    args = parser.parse_args()
    cfg = BucketConfig()
    with tempfile.TemporaryDirectory(prefix="prx-bench-fold-") as tmp:
        exports = placements(Path(tmp) / "demo")
    skips = pa.table(
        {"sample_id": pa.array([], pa.string()), "shard": pa.array([], pa.string()), "index_in_shard": pa.array([], pa.int64())}
    )
    n = exports.num_rows
    buckets = Counter(f"{t}/{b}" for t, b in zip(exports["tier"].to_pylist(), exports["bucket"].to_pylist()))
    print(f"demo corpus: {n} usable images in {len(buckets)} buckets; largest {buckets.most_common(3)}")
    print(f"fold_kept_share per step: {fold_kept_share(1, cfg):.3f} (1 step), {fold_kept_share(2, cfg):.3f} (2 steps)")
    print("min_stream_samples | folded | unpublished (lost) | streamed | median kept side of folded | folds by steps")
    for minimum in args.min:
        policy = FoldPolicy(enabled=minimum > 1, max_steps=args.max_steps, min_stream_samples=minimum)
        plan = plan_folds(exports, skips, cfg, policy)
        steps: Counter[int] = Counter()
        for rel_from, rel_to in plan.folds.items():
            tier = int(rel_from.split("/")[0])
            i = shape_index(tier, *parse_bucket(rel_from.split("/")[1]), cfg)
            j = shape_index(tier, *parse_bucket(rel_to.split("/")[1]), cfg)
            assert i is not None and j is not None
            steps[abs(i - j)] += buckets[rel_from]
        folded = plan.rows.num_rows
        lost = sum(plan.refused.values()) if policy.enabled else sum(c for c in buckets.values() if c < minimum)
        kept = sorted(fold_kept_share(s, cfg) for s, c in steps.items() for _ in range(c))
        median = f"{kept[len(kept) // 2]:.3f}" if kept else "-"
        print(
            f"{minimum:>18} | {folded / n:6.1%} | {lost / n:18.1%} | {(n - lost) / n:8.1%} | {median:>26} | {dict(sorted(steps.items()))}"
        )


if __name__ == "__main__":
    main()
