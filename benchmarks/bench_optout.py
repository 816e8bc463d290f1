"""Time from filing an opt-out request to "excluded from the loader", and bulk resolution.

Part 1, the demo corpus (processed in-process by the plain stages unless ``--root`` names an
already processed data root, e.g. one made by ``prx-data demo``): wall time of
``prx-data optout add`` + ``prx-data optout apply`` as fresh processes (start-up included), then
a check through the training loader that the request's samples are no longer yielded. Baseline
in the same run: what applying used to need, re-exporting every source (then index merge and
skip lists). Goal: under 30 s.

Part 2, synthetic metadata (no image bytes): ``--rows`` raw rows over 4 sources, each exported,
and ``--requests`` requests (ids, keys, URLs, domains; a few with 1,000 URLs each), resolved by
``apply_requests`` and re-applied by the skip-list build (``optout_samples``). Baseline: the old
per-request scan of the corpus (Python loop per request), timed on a few requests and scaled.

    .venv/bin/python -m benchmarks.bench_optout [--root data/demo] [--rows 1000000] [--requests 1000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent


def _env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRX_")}
    env.update(PRX_DATA_ROOT=str(root), PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    return env


CPU: list[float] = []


def _cli(root: Path, *args: str) -> float:
    """Wall seconds of one CLI call as a fresh process; its CPU seconds go to ``CPU``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", *args, "--root", str(root)], check=True, env=_env(root), stdout=subprocess.DEVNULL
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return time.perf_counter() - started


def process_demo(root: Path) -> None:
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.exclusion import compute_skips, write_skip_lists
    from prx_data.demo.corpus import build_demo_corpus
    from prx_data.export.corpus_index import merge_all
    from prx_data.imaging.buckets import BucketConfig
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry
    from prx_data.stages.caption_stage import compute_captions
    from prx_data.stages.export_stage import export_source
    from prx_data.stages.phash_stage import compute_phashes

    build_demo_corpus(root)
    paths = StoragePaths(lance_root=str(root / "lance"), mds_root=str(root / "mds"))
    registry = load_registry(root / "sources")
    for name in registry.sources:
        uri = paths.raw_table(name)
        ingest_source(registry.get(name), uri)
        compute_phashes(uri, executor="local")
        compute_captions(uri, {"backend": "source"}, executor="local")
        export_source(uri, name, mds_root=paths.mds_root, exports_uri=paths.exports_table(name), executor="local")
    merge_all(paths.mds_root)
    _, skips = compute_skips(
        paths, {n: registry.get(n).spec.priority for n in registry.sources}, bucket_cfg=BucketConfig(), exclude_labels=()
    )
    write_skip_lists(paths.mds_root, skips, paths=paths)


def yielded(mds_root: str) -> set[str]:
    from streaming.base.util import clean_stale_shared_memory

    from prx_data.export.tree import list_buckets
    from prx_data.training.loader import PrxStreamingDataset

    seen: set[str] = set()
    for ref in list_buckets(mds_root):
        if not os.path.isfile(os.path.join(ref.dir(mds_root), "index.json")):
            continue
        clean_stale_shared_memory()
        try:
            ds = PrxStreamingDataset(local=ref.dir(mds_root), shuffle=False, batch_size=1)
        except ValueError:
            continue
        seen.update(sample["sample_id"] for sample in ds)
    return seen


def demo_part(root: Path | None, run_baseline: bool = False) -> None:
    import lance

    from prx_data.core.paths import StoragePaths
    from prx_data.ingest.registry import load_registry

    if root is None:
        root = Path(tempfile.mkdtemp(prefix="bench-optout-")) / "demo"
        print(f"processing the demo corpus in {root} (plain stages, in-process) ...", flush=True)
        started = time.perf_counter()
        process_demo(root)
        print(f"  done in {time.perf_counter() - started:.1f}s")
    paths = StoragePaths(lance_root=str(root / "lance"), mds_root=str(root / "mds"))
    sources = sorted(load_registry(root / "sources").sources)
    exported = [
        r
        for s in sources
        for r in lance.dataset(paths.exports_table(s))
        .to_table(columns=["sample_id", "source", "shard"], filter="shard IS NOT NULL")
        .to_pylist()
    ]
    before = yielded(paths.mds_root)
    target = next(r for r in exported if r["sample_id"] in before)
    key = (
        lance.dataset(paths.raw_table(target["source"]))
        .to_table(columns=["source_key"], filter=f"sample_id = '{target['sample_id']}'")["source_key"][0]
        .as_py()
    )

    times, cpu = [], []
    for i in range(3):
        rid = f"bench-{int(time.time())}-{i}"
        t_add = _cli(root, "optout", "add", "--id", rid, "--key", f"{target['source']}:{key}")
        t_apply = _cli(root, "optout", "apply")
        times.append(t_add + t_apply)
        cpu.append(CPU[-1] + CPU[-2])
        after = yielded(paths.mds_root)
        assert target["sample_id"] not in after, "the request's sample is still yielded"
        print(
            f"  run {i + 1}: optout add {t_add:.2f}s + optout apply {t_apply:.2f}s = {t_add + t_apply:.2f}s; excluded from the loader: yes"
        )
    median = statistics.median(times)

    from prx_data.curation.exclusion import compute_skips, write_skip_lists
    from prx_data.export.corpus_index import merge_all
    from prx_data.imaging.buckets import BucketConfig
    from prx_data.stages.export_stage import export_source

    started = time.perf_counter()
    for s in sources:
        export_source(paths.raw_table(s), s, mds_root=paths.mds_root, exports_uri=paths.exports_table(s), executor="local")
    merge_all(paths.mds_root)
    _, skips = compute_skips(paths, {s: 0 for s in sources}, bucket_cfg=BucketConfig(), exclude_labels=())
    write_skip_lists(paths.mds_root, skips, paths=paths)
    baseline = time.perf_counter() - started
    print(
        f"demo ({len(exported)} exported samples, {len(sources)} sources): filing -> excluded, median of 3 = {median:.2f}s wall, "
        f"{statistics.median(cpu):.2f}s CPU, start-up included (goal < 30 s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores) | "
        f"baseline, re-exporting every source in-process without start-up = {baseline:.2f}s | ratio {baseline / median:.1f}x "
        f"(re-export grows with the corpus, apply does not)"
    )
    if run_baseline:
        wall = _cli(root, "run")
        print(f"baseline `prx-data run` (the only way to apply before): {wall:.1f}s wall, {CPU[-1]:.1f}s CPU | ratio {wall / median:.1f}x")


# Synthetic 1M rows -----------------------------------------------------------------------------
def synthetic(root: Path, rows: int, sources: int = 4) -> tuple[list[str], pa.Table]:
    import lance

    from prx_data.core.ids import sample_id
    from prx_data.core.paths import StoragePaths

    paths = StoragePaths(lance_root=str(root / "lance"), mds_root=str(root / "mds"))
    rng = np.random.default_rng(0)
    names, per = [f"src{i}" for i in range(sources)], rows // sources
    corpus = []
    for name in names:
        keys = [f"item/{i:08d}.jpg" for i in range(per)]
        ids = [sample_id(name, k) for k in keys]
        urls = [f"https://h{i % 5000}.site{i % 97}.example/{name}/{i}.jpg" for i in range(per)]
        phash = rng.integers(-(2**63), 2**63 - 1, size=per, dtype=np.int64)
        phash[: per // 20] = phash[per // 20 : 2 * (per // 20)]  # 5 % copies
        sha = [hashlib.sha256(f"{name}{i}".encode()).hexdigest() for i in range(per)]
        raw = pa.table(
            {
                "sample_id": ids,
                "source": [name] * per,
                "source_key": keys,
                "source_url": urls,
                "status": ["ok"] * per,
                "image_sha256": sha,
                "phash": phash,
            }
        )
        lance.write_dataset(raw, paths.raw_table(name), mode="overwrite")
        exports = pa.table(
            {
                "sample_id": ids,
                "source": [name] * per,
                "tier": pa.array([1024] * per, pa.int32()),
                "bucket": ["1024x1024"] * per,
                "shard": [f"1024/1024x1024/{name}/shard.{i // 10000:05d}.mds" for i in range(per)],
                "index_in_shard": pa.array([i % 10000 for i in range(per)], pa.int64()),
                "phash": phash,
                "drop_reason": pa.nulls(per, pa.string()),
                "export_version": ["synthetic"] * per,
            }
        )
        lance.write_dataset(exports, paths.exports_table(name), mode="overwrite")
        corpus.append(raw)
    return names, pa.concat_tables(corpus)


def write_requests(folder: Path, corpus: pa.Table, count: int) -> None:
    import yaml

    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    n = corpus.num_rows
    ids, urls, keys = corpus["sample_id"], corpus["source_url"], corpus["source_key"]
    sources = corpus["source"]
    for i in range(count):
        pick = rng.integers(0, n, size=3)
        request: dict[str, Any] = {"id": f"req-{i:05d}"}

        kind = i % 4
        if kind == 0:
            request["sample_ids"] = [ids[int(p)].as_py() for p in pick]
        elif kind == 1:
            request["source_keys"] = [f"{sources[int(p)].as_py()}:{keys[int(p)].as_py()}" for p in pick] + ["src0:missing.jpg"]
        elif kind == 2:
            bulk = 1000 if i % 100 == 2 else 3
            request["urls"] = [urls[int(p)].as_py() for p in rng.integers(0, n, size=bulk)] + [f"https://gone.example/{i}.jpg"]
        else:
            request["domains"] = [f"h{int(rng.integers(0, 5000))}.site{int(rng.integers(0, 97))}.example"]
        (folder / f"{request['id']}.yaml").write_text(yaml.safe_dump(request))


def old_resolve_one(request, corpus_lists) -> int:
    """The pre-issue-12 algorithm: one Python pass over the corpus per request."""
    ids, urls = corpus_lists
    known = set(ids)
    matched = {s for s in request.sample_ids if s in known}
    wanted = set(request.urls)
    for sid, url in zip(ids, urls):
        if url in wanted:
            matched.add(sid)
        elif request.domains:
            host = url.split("/")[2]
            if any(host == d or host.endswith("." + d) for d in request.domains):
                matched.add(sid)
    return len(matched)


def synthetic_part(rows: int, requests: int) -> None:
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.exclusion import exported_samples, optout_samples
    from prx_data.curation.optout.requests import apply_requests, load_requests

    root = Path(tempfile.mkdtemp(prefix="bench-optout-1m-"))
    started = time.perf_counter()
    names, corpus = synthetic(root, rows)
    write_requests(root / "optout", corpus, requests)
    print(f"synthetic: {rows:,} rows in {len(names)} sources and {requests} requests written in {time.perf_counter() - started:.1f}s")
    paths = StoragePaths(lance_root=str(root / "lance"), mds_root=str(root / "mds"))
    resolve_times, skip_times = [], []
    for _ in range(3):
        started = time.perf_counter()
        report = apply_requests(paths, str(root / "optout"), names)
        resolve_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        exports = exported_samples(paths, {n: 0 for n in names})
        covered = optout_samples(paths, exports, names)
        skip_times.append(time.perf_counter() - started)
    audit = report.audit
    print(
        f"  resolved {report.requests} requests: {report.matched.num_rows:,} matches, "
        f"{sum(len(u) for u in audit['unmatched'].to_pylist()):,} unmatched names, {covered.num_rows:,} (sample, request) pairs at skip-list build"
    )
    resolve, skip = statistics.median(resolve_times), statistics.median(skip_times)

    loaded = load_requests(root / "optout")
    lists = (corpus["sample_id"].to_pylist(), corpus["source_url"].to_pylist())
    sample = [loaded.requests[k].request for k in sorted(loaded.requests)[:4]]
    started = time.perf_counter()
    for r in sample:
        old_resolve_one(r, lists)
    per_request = (time.perf_counter() - started) / len(sample)
    old_total = per_request * requests
    print(
        f"1,000 requests x {rows:,} rows: resolution (optout_requests) median {resolve:.2f}s, re-applied at skip-list build "
        f"median {skip:.2f}s | baseline per-request scans {per_request:.2f}s/request -> ~{old_total:.0f}s for {requests} "
        f"(extrapolated from {len(sample)}) | ratio {old_total / resolve:.0f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="an already processed data root (default: process the demo in a temp folder)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--baseline-run", action="store_true", help="also time `prx-data run` on the demo (minutes)")
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    if not args.skip_demo:
        demo_part(args.root, args.baseline_run)
    if not args.skip_synthetic:
        synthetic_part(args.rows, args.requests)


if __name__ == "__main__":
    main()
