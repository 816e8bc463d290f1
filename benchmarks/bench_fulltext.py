"""Full-text query latency on a synthetic caption table: 1,000 fragments vs. compacted to one.

What the corpus explorer's search does on a big source table: a BM25 query over an INVERTED
index on ``caption`` (top ``k``), and a lookup of one row by ``sample_id`` through a BTREE
index. The table is written in ``--fragments`` fragments (what many small ingests leave), indexed,
measured, then compacted to one fragment per ``--rows`` rows and measured again, on the same
data. The compacted version keeps the index that compaction remapped; ``--rebuild`` also measures
a freshly built index on the compacted table. Baselines in the same run: the substring scan the
explorer falls back to without an index, and the lookup with the scalar index switched off.

Captions are 8-32 words drawn from a Zipf (s=1.1) vocabulary of pseudo-words, so some query
words are in most captions and some in a handful. Queries cycle through four kinds: a frequent
word (rank 1-20), a middling one (rank 100-1000), a rare one (rank 5000+) and two middling words.

    .venv/bin/python -m benchmarks.bench_fulltext [--rows 1000000] [--fragments 1000] [--queries 200]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# What a search page shows per hit; _score named so Lance does not add it on its own (and warn).
FTS_COLUMNS = {"sample_id": "sample_id", "caption": "caption", "_score": "_score"}


def vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """Distinct pronounceable-ish words; no English stop word can appear (Lance drops those)."""
    words: set[str] = set()
    consonants, vowels = list("bcdfghklmnprstvz"), list("aeiou")
    while len(words) < size:
        n = int(rng.integers(2, 5))
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(n)) + "x")
    # The trailing 'x' keeps the stemmer from folding two words into one token. Shuffled, so a
    # word's frequency rank has nothing to do with its spelling.
    return rng.permutation(np.array(sorted(words)))


def captions(rows: int, vocab: np.ndarray, rng: np.random.Generator) -> tuple[pa.Array, np.ndarray]:
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    p = ranks**-1.1
    p /= p.sum()
    lengths = rng.integers(8, 33, rows)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.choice(len(vocab), size=int(offsets[-1]), p=p)
    words = pa.array(vocab).take(pa.array(ids))
    # Joined by Arrow in one pass: a Python loop over a million captions would dominate the setup.
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), words), " "), ids


def sample_ids(rows: int, rng: np.random.Generator) -> pa.Array:
    hexed = rng.integers(0, 256, size=(rows, 16), dtype=np.uint8).tobytes().hex()
    return pa.array([hexed[i * 32 : (i + 1) * 32] for i in range(rows)])


def queries(vocab: np.ndarray, n: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        kind = ("frequent", "middling", "rare", "two words")[i % 4]
        if kind == "frequent":
            q = vocab[rng.integers(0, 20)]
        elif kind == "middling":
            q = vocab[rng.integers(100, 1000)]
        elif kind == "rare":
            q = vocab[rng.integers(5000, len(vocab))]
        else:
            q = " ".join(vocab[rng.integers(100, 1000, 2)])
        out.append((kind, str(q)))
    return out


def timed(fn) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def fts_latencies(ds: lance.LanceDataset, qs: list[tuple[str, str]], k: int) -> tuple[list[float], dict[str, list[float]], int]:
    for _, q in qs[:5]:  # warm the index cache, as a running explorer would have
        ds.to_table(columns=["sample_id"], full_text_query=q, limit=k)
    total: list[float] = []
    by_kind: dict[str, list[float]] = {}
    hits = 0
    for kind, q in qs:
        seconds, table = timed(lambda q=q: ds.to_table(columns=FTS_COLUMNS, full_text_query={"query": q, "columns": ["caption"]}, limit=k))
        total.append(seconds)
        by_kind.setdefault(kind, []).append(seconds)
        hits += table.num_rows
    return total, by_kind, hits


def lookup_latencies(ds: lance.LanceDataset, ids: list[str], use_index: bool = True) -> list[float]:
    out = []
    for sid in ids:
        seconds, table = timed(
            lambda sid=sid: ds.to_table(columns=["sample_id", "caption"], filter=f"sample_id = '{sid}'", use_scalar_index=use_index)
        )
        assert table.num_rows == 1
        out.append(seconds)
    return out


def substring_latencies(ds: lance.LanceDataset, qs: list[tuple[str, str]], k: int) -> list[float]:
    out = []
    for _, q in qs:
        word = q.split()[0]
        seconds, _ = timed(lambda word=word: ds.to_table(columns=["sample_id", "caption"], filter=f"caption ILIKE '%{word}%'", limit=k))
        out.append(seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fragments", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--baseline-queries", type=int, default=12, help="substring / unindexed lookups (slow)")
    parser.add_argument("--k", type=int, default=100, help="top-k per full-text query (the explorer asks >= 100)")
    parser.add_argument("--vocab", type=int, default=20_000)
    parser.add_argument("--rebuild", action="store_true", help="also measure an index built afresh after compaction")
    parser.add_argument("--dir", help="where to write the table (default: a temporary folder, removed after)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    workdir = args.dir or tempfile.mkdtemp(prefix="bench-fulltext-")
    uri = f"{workdir.rstrip('/')}/captions.lance"
    started = time.perf_counter()
    try:
        vocab = vocabulary(args.vocab, rng)
        seconds, (caption, _) = timed(lambda: captions(args.rows, vocab, rng))
        ids = sample_ids(args.rows, rng)
        table = pa.table({"sample_id": ids, "caption": caption})
        print(f"generated {args.rows:,} captions ({pc.mean(pc.utf8_length(caption)).as_py():.0f} chars avg) in {seconds:.1f} s")
        per_fragment = max(1, -(-args.rows // args.fragments))
        seconds, ds = timed(
            lambda: lance.write_dataset(
                table, uri, mode="overwrite", max_rows_per_file=per_fragment, max_rows_per_group=min(per_fragment, 1024)
            )
        )
        print(f"wrote {len(ds.get_fragments())} fragments in {seconds:.1f} s")
        fts_build, _ = timed(lambda: ds.create_scalar_index("caption", "INVERTED"))
        btree_build, _ = timed(lambda: ds.create_scalar_index("sample_id", "BTREE"))
        print(f"INVERTED index on caption: {fts_build:.1f} s; BTREE on sample_id: {btree_build:.1f} s")
        fragmented = lance.dataset(uri)
        qs = queries(vocab, args.queries, rng)
        lookup_ids = [ids[int(i)].as_py() for i in rng.integers(0, args.rows, args.lookups)]
        base_qs = qs[: args.baseline_queries]

        layouts = []

        def measure(name: str, dataset: lance.LanceDataset, build_s: float | None) -> None:
            stats = dataset.index_statistics("caption_idx")
            total, by_kind, hits = fts_latencies(dataset, qs, args.k)
            lookups = lookup_latencies(dataset, lookup_ids)
            layouts.append((name, len(dataset.get_fragments()), stats["num_unindexed_rows"], build_s, total, by_kind, hits, lookups))
            print(f"measured: {name}")

        measure(f"{args.fragments} fragments", fragmented, fts_build)
        substring = substring_latencies(fragmented, base_qs, args.k)
        unindexed_lookup = lookup_latencies(fragmented, lookup_ids[: args.baseline_queries], use_index=False)

        seconds, metrics = timed(lambda: fragmented.optimize.compact_files(target_rows_per_fragment=args.rows))
        compacted = lance.dataset(uri)
        print(f"compacted to {len(compacted.get_fragments())} fragment(s) in {seconds:.1f} s ({metrics}); index remapped by compaction")
        measure("compacted (remapped index)", compacted, None)
        if args.rebuild:
            rebuild, _ = timed(lambda: compacted.create_scalar_index("caption", "INVERTED", replace=True))
            measure("compacted (index rebuilt)", lance.dataset(uri), rebuild)

        print()
        print(f"Full-text query latency: {args.rows:,} rows, {args.queries} queries, top {args.k}, INVERTED index on caption")
        print(f"{'layout':<34}{'fragments':>10}{'unindexed':>10}{'index build':>12}{'p50 ms':>9}{'p95 ms':>9}   p50 by kind (ms)")
        for name, frags, unindexed, build_s, total, by_kind, hits, _ in layouts:
            p50, p95 = percentiles(total)
            kinds = ", ".join(f"{kind} {percentiles(v)[0]:.1f}" for kind, v in by_kind.items())
            build = f"{build_s:.1f} s" if build_s is not None else "-"
            print(f"{name:<34}{frags:>10}{unindexed:>10}{build:>12}{p50:>9.1f}{p95:>9.1f}   {kinds}; {hits / len(total):.0f} hits/query")
        first, last = percentiles(layouts[0][4]), percentiles(layouts[1][4])
        print(f"{'ratio fragmented/compacted':<66}{first[0] / last[0]:>9.2f}{first[1] / last[1]:>9.2f}")
        s50, s95 = percentiles(substring)
        print(
            f"{'baseline: substring ILIKE scan, no index':<66}{s50:>9.1f}{s95:>9.1f}   ({len(base_qs)} queries, {args.fragments} fragments)"
        )
        print()
        print(f"Lookup by sample_id ({args.lookups} random ids)")
        print(f"{'layout':<42}{'p50 ms':>9}{'p95 ms':>9}")
        for name, *_rest, lookups in layouts:
            p50, p95 = percentiles(lookups)
            verdict = "under" if p50 < 50 else "OVER"
            print(f"{name + ' (BTREE)':<42}{p50:>9.1f}{p95:>9.1f}   {verdict} the 50 ms target")
        u50, u95 = percentiles(unindexed_lookup)
        print(
            f"{'baseline: full scan':<42}{u50:>9.1f}{u95:>9.1f}   ({len(unindexed_lookup)} lookups, {args.fragments} fragments, scalar index off)"
        )
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
    finally:
        if not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
