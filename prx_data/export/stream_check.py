"""Check that one published bucket is streamable, as a trainer opens it, without importing streaming.

PRX's trainer builds a plain ``streaming.StreamingDataset`` over a bucket's merged ``index.json``
(a local folder or an object store). ``read_bucket`` checks the bucket the way that dataset opens
it: it reads the merged index through ``prx_data.core.storage``, validates what StreamingDataset
needs from it (index version, shard entries, sample counts, basenames inside the bucket folder),
(``export/index_check.py``, shared with the training loader), then reads the first and the last sample back with the project's MDS reader
(``export/mds_format.py``). That reader reproduces streaming 0.13's reading of MDS shards: parity
is tested in ``prx_data_tests/export/test_mds_format.py``
(``test_reader_returns_what_streamings_reader_returns``), and
``prx_data_tests/export/test_stream_check.py`` checks that this module's count and samples are
what ``StreamingDataset`` reads from the same bucket.

Importing ``streaming`` runs its package ``__init__`` (torch, transformers): seconds for every run
that changes the corpus, where this check is a blocking one. This module imports neither.
Training still reads with ``StreamingDataset``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

from prx_data.core.storage import Location, fetch_local, file_size, locate, try_read_bytes
from prx_data.export.corpus_index import unpublished_buckets
from prx_data.export.index_check import MAX_INDEX_BYTES, MDS_COLUMNS, check_size, parse_index
from prx_data.export.mds_format import MdsShardReader
from prx_data.export.tree import INDEX_BASENAME, BucketRef, list_buckets, list_sources


def stream_buckets(mds_root: str, storage_options: dict | None = None) -> list[BucketRef]:
    """The buckets a trainer is meant to stream: not unpublished on purpose, and not emptied by
    every source (a retired bucket whose old shards wait for garbage collection is no stream)."""
    unpublished = set(unpublished_buckets(mds_root, storage_options))
    return [
        ref
        for ref in list_buckets(mds_root, storage_options)
        if ref.rel not in unpublished and list_sources(ref.dir(mds_root), storage_options)
    ]


def read_bucket(bucket_dir: str, storage_options: dict | None = None) -> int:
    """Check one bucket as ``StreamingDataset`` would open it and read its first and last sample
    (two shards at most: a remote bucket is never downloaded whole). Returns the sample count.

    Raises ValueError naming the bucket (and the shard) on any problem: no or malformed
    ``index.json``, a shard entry streaming would refuse, no samples, a basename leaving the
    bucket folder, a missing, truncated or corrupt shard, a sample without its columns or image.
    """
    return read_edge_samples(bucket_dir, storage_options)[0]


def read_edge_samples(bucket_dir: str, storage_options: dict | None = None) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """``read_bucket``'s work: (sample count, first sample, last sample), numbered as
    ``StreamingDataset`` numbers them (shard after shard, in index order)."""
    bucket = locate(bucket_dir, storage_options)
    shards = _index_shards(bucket, bucket_dir)
    total = sum(info["samples"] for info in shards)
    if total == 0:
        raise ValueError(f"bucket {bucket_dir}: its {INDEX_BASENAME} lists {len(shards)} shard(s) and no samples")
    holding = [info for info in shards if info["samples"]]
    first, last = holding[0], holding[-1]
    with tempfile.TemporaryDirectory(prefix="prx-stream-check-") as scratch:
        if first is last:
            head, tail = _read_samples(bucket, bucket_dir, first, [0, first["samples"] - 1], scratch)
        else:
            (head,) = _read_samples(bucket, bucket_dir, first, [0], scratch)
            (tail,) = _read_samples(bucket, bucket_dir, last, [last["samples"] - 1], scratch)
    return total, head, tail


def _index_shards(bucket: Location, bucket_dir: str) -> list[dict[str, Any]]:
    """The shard entries of the bucket's merged index, each checked for what streaming needs
    (``export.index_check``: basenames, counts, the index's size before it is parsed)."""
    where = f"bucket {bucket_dir}: {INDEX_BASENAME}"
    try:
        check_size(file_size(bucket.child(INDEX_BASENAME)), MAX_INDEX_BYTES, where)
        raw = try_read_bytes(bucket.child(INDEX_BASENAME))
    except OSError as exc:
        raise ValueError(f"{where} could not be read: {exc}") from exc
    if raw is None:
        raise ValueError(f"{where} does not exist (the bucket is not published)")
    return parse_index(raw, where, MDS_COLUMNS)


def _read_samples(bucket: Location, bucket_dir: str, info: Mapping[str, Any], indices: list[int], scratch: str) -> list[dict[str, Any]]:
    """Open one shard (a local file in place, an object copied into ``scratch``) and read the
    samples at ``indices`` (positions in the shard), each checked for its columns and image."""
    basename = info["raw_data"]["basename"]
    where = f"bucket {bucket_dir}: shard {basename}"
    loc = bucket.child(*basename.split("/"))  # inside the bucket: index_check vetted the basename
    samples = []
    try:
        path = fetch_local(loc, scratch)
        with MdsShardReader(path, info) as shard:
            for index in indices:
                sample = shard[index]
                lacking = MDS_COLUMNS - set(sample)
                if lacking:
                    raise ValueError(f"sample {index} lacks column(s) {sorted(lacking)}")
                image = sample["image"]
                if not isinstance(image, bytes) or not image:
                    raise ValueError(f"sample {index} has no image bytes")
                samples.append(sample)
    except FileNotFoundError as exc:
        raise ValueError(f"{where} is listed in {INDEX_BASENAME} but does not exist") from exc
    except (OSError, ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    return samples
