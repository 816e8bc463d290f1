"""A corpus a trainer could trip over, and two readers that must not.

``LAYOUT`` has a bucket with a few skips, a plain one, a sparse one, a fully skipped one, a rare
tier with one small published bucket and a rare tier whose only bucket is sparse. It is written
the way the pipeline writes it (two sources, ``corpus_index`` merge, skip lists, then the
publication decided again from the current skips), on a local or an ``s3://`` root.

``prx_style_epoch`` reads it the way PRX's trainer does (``prx/dataset/mds_dataset.py`` in
Photoroom/PRX, read by hand, not copied): each tier folder is a ``local`` path, each of its
direct subfolders holding an ``index.json`` becomes one ``streaming.Stream``, and the dataset
batches with ``batching_method="device_per_stream"``. It knows nothing of skip lists.
"""

from __future__ import annotations

import gc
import io
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from PIL import Image
from streaming.base.util import clean_stale_shared_memory

from prx_data.core.storage import is_remote, list_dir, locate, try_read_bytes
from prx_data.export.corpus_index import INDEX_BASENAME, merge_all
from prx_data.export.mds_writer import MdsWriterConfig, write_partition
from prx_data.export.skiplist import build_skiplists

MIN_STREAM_SAMPLES = 6
BATCH_SIZES = (1, 4, MIN_STREAM_SAMPLES)
# (tier, height, width) -> (samples, skipped)
LAYOUT = {
    (512, 512, 512): (30, 3),  # published, a few samples skipped
    (512, 464, 576): (10, 0),  # published
    (512, 576, 464): (3, 0),  # sparse: fewer than MIN_STREAM_SAMPLES
    (1024, 1024, 1024): (8, 8),  # every sample skipped (published by count until skips land)
    (2048, 2048, 2048): (7, 0),  # a rare tier, just above the minimum
    (4096, 4096, 4096): (2, 0),  # a rare tier whose only bucket is sparse
}
PUBLISHED = {"512/512x512", "512/464x576", "2048/2048x2048"}
SMALL = MdsWriterConfig(size_limit=6_000, max_buffered_bytes=10_000_000)


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (16, 24, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=92)
    return out.getvalue()


@dataclass
class Corpus:
    root: str
    options: dict | None
    lineage: pa.Table
    skipped: set[str]

    def bucket_of(self) -> dict[str, str]:
        return {r["sample_id"]: f"{r['tier']}/{r['bucket']}" for r in self.lineage.to_pylist()}

    def kept_by_bucket(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for sid, rel in self.bucket_of().items():
            if sid not in self.skipped:
                out.setdefault(rel, set()).add(sid)
        return out

    def all_by_bucket(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for sid, rel in self.bucket_of().items():
            out.setdefault(rel, set()).add(sid)
        return out


def _samples(source: str, parity: int) -> list[dict]:
    samples = []
    for (tier, height, width), (count, _) in sorted(LAYOUT.items()):
        for i in range(count):
            if i % 2 != parity:
                continue
            samples.append(
                {
                    "tier": tier,
                    "height": height,
                    "width": width,
                    "image": _jpeg(hash((tier, height, width, i)) % 2**32),
                    "caption": f"{source} {tier} {height}x{width} {i}",
                    "sample_id": f"{tier}-{height}x{width}-{i:03d}",
                    "source": source,
                    "original_width": width,
                    "original_height": height,
                    "label": "visual",
                    "caption_model": "test",
                }
            )
    return samples


def skip_rows(lineage: pa.Table, skipped: set[str]) -> pa.Table:
    rows = [
        {
            "sample_id": r["sample_id"],
            "shard": r["shard"],
            "index_in_shard": r["index_in_shard"],
            "reason": "optout:req-1",
            "kept_sample_id": None,
        }
        for r in lineage.to_pylist()
        if r["sample_id"] in skipped
    ]
    schema = pa.schema(
        [
            ("sample_id", pa.string()),
            ("shard", pa.string()),
            ("index_in_shard", pa.int64()),
            ("reason", pa.string()),
            ("kept_sample_id", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def build_corpus(root: str, options: dict | None = None) -> Corpus:
    """Export, index, skip, then publish again: the corpus job's order."""
    lineages = []
    for parity, source in enumerate(("alpha", "beta")):
        export = write_partition(_samples(source, parity), mds_root=root, source=source, storage_options=options, config=SMALL)
        lineages.append(export.lineage)
    lineage = pa.concat_tables(lineages)
    merge_all(root, options, min_stream_samples=MIN_STREAM_SAMPLES, gc_min_age_s=0)
    skipped = set()
    for (tier, height, width), (_, skip) in LAYOUT.items():
        skipped |= {f"{tier}-{height}x{width}-{i:03d}" for i in range(skip)}
    build_skiplists(skip_rows(lineage, skipped), root, storage_options=options)
    merge_all(root, options, min_stream_samples=MIN_STREAM_SAMPLES, gc_min_age_s=0)
    return Corpus(root, options, lineage, skipped)


def release() -> None:
    gc.collect()
    clean_stale_shared_memory()


def prx_style_folders(tier_dir: str, options: dict | None = None) -> list[str]:
    """PRX's discovery: the folder itself if it holds index.json, else its direct subfolders
    that hold one (one level, no recursion)."""
    loc = locate(tier_dir, options)
    if try_read_bytes(loc.child(INDEX_BASENAME)) is not None:
        return [tier_dir]
    return [
        f"{tier_dir.rstrip('/')}/{entry.name}"
        for entry in list_dir(loc)
        if entry.is_dir and try_read_bytes(loc.child(entry.name, INDEX_BASENAME)) is not None
    ]


def prx_style_epoch(tier_dirs: list[str], batch_size: int, cache_dir: str | None = None, options: dict | None = None) -> list[list[str]]:
    """Batches of sample ids of one full epoch, read as PRX's trainer reads."""
    from streaming import Stream, StreamingDataset

    streams = []
    for tier_dir in tier_dirs:
        for folder in prx_style_folders(tier_dir, options):
            if is_remote(folder):
                assert cache_dir is not None, "a remote folder needs a cache_dir"
                local = os.path.join(cache_dir, folder.split("://", 1)[1].replace("/", "_"))
                streams.append(Stream(remote=folder, local=local))
            else:
                streams.append(Stream(local=folder))
    release()
    dataset = StreamingDataset(streams=streams, batch_size=batch_size, shuffle=True, shuffle_seed=11, batching_method="device_per_stream")
    try:
        ids = [sample["sample_id"] for sample in dataset]
    finally:
        del dataset
        release()
    return [ids[i : i + batch_size] for i in range(0, len(ids), batch_size)]


def loader_epoch(loader) -> list[list[str]]:
    """Batches of sample ids of one full epoch of a project loader."""
    try:
        return [list(batch["sample_id"]) for batch in loader]
    finally:
        del loader
        release()
