"""What a fresh export worker pays before and while it writes one shard, and what re-reading an old
shard costs the driver: PRX's MDS module (``export.mds_format``) against mosaicml-streaming's
``MDSWriter`` / ``reader_from_json`` (the baseline, what the export used before), same run.

    .venv/bin/python -m benchmarks.bench_export_setup --repeats 5 --samples 200

Each repeat is one fresh interpreter per variant (run alternately): import the writer, write
``--samples`` samples (``--kb`` KB JPEG-like payload each) as one shard with the export's
columns, read every sample back. Printed per variant, medians over repeats: import seconds,
write+read seconds, total seconds, peak RSS (MB) of the process, and whether torch /
transformers / streaming were loaded; then the ratios streaming/ours. The 1-min load average is
printed before and after: on a shared machine wall times move with it, the ratios much less.
A third variant times the export's own path (``write_partition`` + ``ShardReader``) from a
fresh interpreter, as an export Ray task runs it. ``--mb`` then times steady-state writing:
``--mb`` MB of 256 KB samples into 128 MB shards, each writer in its own process (imports not
counted), medians of ``--repeats``, MB/s and ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMMON = """
import json, os, resource, sys, tempfile, time
t0 = time.perf_counter()
{imports}
from prx_data.export.mds_rows import MdsWriterConfig
t1 = time.perf_counter()
columns = MdsWriterConfig().columns()
payload = b"\\xff\\xd8\\xff" + os.urandom({kb} * 1024)
rows = [dict(image=payload, caption=f"caption {{i}}", sample_id=f"s{{i:06d}}", source="alpha", original_width=512,
             original_height=512, label="visual", caption_model="m") for i in range({n})]
out = tempfile.mkdtemp()
{body}
t2 = time.perf_counter()
heavy = sorted(m for m in ("torch", "transformers", "streaming") if m in sys.modules)
print("RESULT=" + json.dumps(dict(imports=t1 - t0, work=t2 - t1, total=t2 - t0,
      rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, heavy=heavy)))
"""

VARIANTS = {
    "streaming MDSWriter + reader_from_json (before)": (
        "from streaming.base.format.mds.writer import MDSWriter\nfrom streaming.base.format import reader_from_json",
        """
w = MDSWriter(out=out, columns=columns, compression=None, size_limit=128 << 20)
for r in rows:
    w.write(r)
w.finish()
info = json.load(open(os.path.join(out, "index.json")))["shards"][0]
reader = reader_from_json(out, None, info)
assert [reader[i]["sample_id"] for i in range(len(rows))] == [r["sample_id"] for r in rows]
""",
    ),
    "prx mds_format writer + reader (after)": (
        "from prx_data.export.mds_format import MdsShardReader, MdsShardWriter",
        """
w = MdsShardWriter(out, columns, size_limit=128 << 20)
for r in rows:
    w.write(r)
(info,) = w.finish()
with MdsShardReader(os.path.join(out, info["raw_data"]["basename"]), info) as reader:
    assert [reader[i]["sample_id"] for i in range(len(rows))] == [r["sample_id"] for r in rows]
""",
    ),
    "export path: write_partition + ShardReader (after)": (
        "from prx_data.export.mds_writer import write_partition\nfrom prx_data.export.reuse import ShardReader, source_indexes",
        """
samples = [dict(r, tier=512, height=512, width=512) for r in rows]
res = write_partition(samples, mds_root=out, source="alpha")
placements = [(x["shard"], x["index_in_shard"]) for x in res.lineage.to_pylist()]
got = ShardReader(out, source_indexes(out, "alpha"), "alpha", tempfile.mkdtemp()).read(placements)
assert len(list(got)) == len(rows)
""",
    ),
}


def _run(imports: str, body: str, n: int, kb: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    code = COMMON.format(imports=imports, body=body, n=n, kb=kb)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=600)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT="))
    return json.loads(line.removeprefix("RESULT="))


THROUGHPUT = """
import os, shutil, sys, tempfile, time
kind, mb = sys.argv[1], int(sys.argv[2])
from prx_data.export.mds_rows import MdsWriterConfig
columns = MdsWriterConfig().columns()
if kind == "streaming":
    from streaming.base.format.mds.writer import MDSWriter
else:
    from prx_data.export.mds_format import MdsShardWriter
payload = b"\\xff\\xd8\\xff" + os.urandom(256 * 1024)
rows = [dict(image=payload, caption=f"caption {i}", sample_id=f"s{i:06d}", source="alpha", original_width=512,
             original_height=512, label="visual", caption_model="m") for i in range(mb * 4)]
out = tempfile.mkdtemp()
t0 = time.perf_counter()
if kind == "streaming":
    w = MDSWriter(out=out, columns=columns, compression=None, size_limit=128 << 20)
else:
    w = MdsShardWriter(out, columns, size_limit=128 << 20)
for r in rows:
    w.write(r)
w.finish()
print("SECONDS=%f" % (time.perf_counter() - t0))
shutil.rmtree(out)
"""


def _throughput(kind: str, mb: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", THROUGHPUT, kind, str(mb)], env=env, capture_output=True, text=True, check=True, timeout=600
    )
    return float(next(line for line in out.stdout.splitlines() if line.startswith("SECONDS=")).removeprefix("SECONDS="))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--kb", type=int, default=64)
    parser.add_argument("--mb", type=int, default=0, help="also time steady-state writing of this many MB (0: skip)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, (imports, body) in VARIANTS.items():
            results[name].append(_run(imports, body, args.samples, args.kb))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"{args.samples} samples x {args.kb} KB, one shard, medians of {args.repeats} fresh interpreters")
    med: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        med[name] = {key: statistics.median(r[key] for r in runs) for key in ("imports", "work", "total", "rss_mb")}
        m = med[name]
        print(
            f"  {name:52s} import {m['imports']:6.2f} s  write+read {m['work']:5.2f} s  total {m['total']:6.2f} s  "
            f"peak RSS {m['rss_mb']:6.0f} MB  loaded {runs[0]['heavy']}"
        )
    before, after = med["streaming MDSWriter + reader_from_json (before)"], med["prx mds_format writer + reader (after)"]
    print(
        f"ratio before/after: import {before['imports'] / after['imports']:.1f}x  total {before['total'] / after['total']:.1f}x  "
        f"peak RSS {before['rss_mb'] / after['rss_mb']:.1f}x"
    )
    if args.mb:
        times: dict[str, list[float]] = {"streaming": [], "ours": []}
        for _ in range(args.repeats):
            for kind in times:
                times[kind].append(_throughput(kind, args.mb))
        rates = {kind: args.mb / statistics.median(t) for kind, t in times.items()}
        print(
            f"steady-state write, {args.mb} MB in 128 MB shards: streaming MDSWriter {rates['streaming']:.0f} MB/s, "
            f"mds_format {rates['ours']:.0f} MB/s, ratio ours/streaming {rates['ours'] / rates['streaming']:.2f}"
        )
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
