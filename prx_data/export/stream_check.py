"""Open one published bucket the way a trainer does, and read a sample back.

A plain ``streaming.StreamingDataset`` over the bucket's merged ``index.json`` is what PRX's
trainer builds, so this is the test that the export is streamable: local folder or object store.
"""

from __future__ import annotations

import contextlib
import tempfile
import time

from prx_data.core.storage import local_path
from prx_data.export.corpus_index import unpublished_buckets
from prx_data.export.tree import BucketRef, list_buckets, list_sources

MDS_COLUMNS = {"image", "caption", "sample_id"}


def stream_buckets(mds_root: str, storage_options: dict | None = None) -> list[BucketRef]:
    """The buckets a trainer is meant to stream: not unpublished on purpose, and not emptied by
    every source (a retired bucket whose old shards wait for garbage collection is no stream)."""
    unpublished = set(unpublished_buckets(mds_root, storage_options))
    return [
        ref
        for ref in list_buckets(mds_root, storage_options)
        if ref.rel not in unpublished and list_sources(ref.dir(mds_root), storage_options)
    ]


def read_bucket(bucket_dir: str, storage_options: dict | None = None, attempts: int = 4) -> int:
    """Open one bucket with a plain ``StreamingDataset`` and read its first and last sample (two
    shards at most: a remote bucket is not downloaded whole). Returns the sample count; raises
    what streaming raises.

    streaming names its shared memory by the first free number on the machine: two processes
    opening datasets at the same moment (another run's check, a trainer) can pick the same name
    and one gets FileExistsError. That says nothing about the bucket, so it is tried again.
    """
    for attempt in range(attempts):
        try:
            return _read_bucket_once(bucket_dir, storage_options)
        except FileExistsError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _read_bucket_once(bucket_dir: str, storage_options: dict | None) -> int:
    from streaming import Stream, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    # lazy: imports streaming's top level (torch), like the two imports above
    from prx_data.compat.streaming_internals import configure_downloads

    clean_stale_shared_memory()
    with contextlib.ExitStack() as stack:
        folder = local_path(bucket_dir)
        if folder is not None:  # streaming reads a local bucket in place
            ds = StreamingDataset(local=folder, shuffle=False, batch_size=1)
        else:
            # The stream's downloads use these options, as the training loader's do; nothing
            # is read from (or set in) this process's environment.
            cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="prx-stream-check-"))
            stream = configure_downloads(Stream(remote=bucket_dir, local=cache), storage_options)
            ds = StreamingDataset(streams=[stream], shuffle=False, batch_size=1)
        try:
            n = ds.num_samples
            if n == 0:
                raise ValueError("the index lists no samples")
            for i in {0, n - 1}:
                sample = ds[i]
                lacking = MDS_COLUMNS - set(sample)
                if lacking:
                    raise ValueError(f"sample {i} lacks column(s) {sorted(lacking)}")
                if not sample["image"]:
                    raise ValueError(f"sample {i} has no image bytes")
            return n
        finally:
            # Two live datasets on one folder in a process collide in streaming's shared memory.
            del ds
            clean_stale_shared_memory()
