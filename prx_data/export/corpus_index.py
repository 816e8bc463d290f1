"""Merge the per-source ``index.json`` files of a bucket into one index at the bucket folder.

With the merged index, ``StreamingDataset(local=<bucket folder>)`` (or one ``Stream`` per bucket)
reads every source of the bucket as one stream; shard basenames become ``<source>/shard.NNNNN.mds``.
Sources are merged in sorted order, so the result (and its bytes) only depend on what the
source folders hold. The merged index carries an extra ``prx`` block, ignored by streaming,
with each source's index sha256: the loader uses it to notice a stale merge or stale skip lists.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass

from prx_data.export._fs import dumps_stable, sha256_bytes, write_if_changed
from prx_data.export.tree import INDEX_BASENAME, list_buckets, list_sources

MERGED_FORMAT = 1


@dataclass(frozen=True)
class MergedIndex:
    bucket_dir: str
    sources: dict[str, str]  # source -> sha256 of its index.json
    num_shards: int
    num_samples: int
    written: bool  # False when the file already held these exact bytes (or was removed)


class StaleIndexError(RuntimeError):
    """The merged index no longer matches the source indexes it was built from."""


def _prefixed(info: dict, source: str) -> dict:
    info = copy.deepcopy(info)
    for key in ("raw_data", "zip_data"):
        if info.get(key):
            info[key]["basename"] = f"{source}/{info[key]['basename']}"
    return info


def source_index_digests(bucket_dir: str) -> dict[str, str]:
    """sha256 of every committed source's index.json in the bucket, by source."""
    digests = {}
    for source in list_sources(bucket_dir):
        with open(os.path.join(bucket_dir, source, INDEX_BASENAME), "rb") as handle:
            digests[source] = sha256_bytes(handle.read())
    return digests


def merge_bucket_index(bucket_dir: str) -> MergedIndex:
    """(Re)write ``<bucket_dir>/index.json``; remove it when the bucket has no source left."""
    path = os.path.join(bucket_dir, INDEX_BASENAME)
    shards: list[dict] = []
    sources: dict[str, str] = {}
    samples_by_source: dict[str, int] = {}
    columns: tuple | None = None
    for source in list_sources(bucket_dir):
        with open(os.path.join(bucket_dir, source, INDEX_BASENAME), "rb") as handle:
            raw = handle.read()
        sources[source] = sha256_bytes(raw)
        obj = json.loads(raw)
        if obj.get("version") != 2:
            raise ValueError(f"{bucket_dir}/{source}/{INDEX_BASENAME}: unsupported index version {obj.get('version')}")
        samples_by_source[source] = 0
        for info in obj["shards"]:
            # A batch is collated across sources, so every shard of a bucket must share columns.
            these = (tuple(info.get("column_names", ())), tuple(info.get("column_encodings", ())))
            if columns is None:
                columns = these
            elif these != columns:
                raise ValueError(
                    f"{bucket_dir}/{source}: columns {these} differ from the bucket's {columns}; "
                    "re-export the source with the same writer config"
                )
            shards.append(_prefixed(info, source))
            samples_by_source[source] += int(info["samples"])
    if not shards:
        written = os.path.exists(path)
        if written:
            os.remove(path)  # an empty index would make StreamingDataset fail on this stream
        return MergedIndex(bucket_dir, {}, 0, 0, written)
    obj = {
        "version": 2,
        "shards": shards,
        "prx": {
            "format": MERGED_FORMAT,
            "sources": {
                name: {"index_sha256": digest, "samples": samples_by_source[name]}
                for name, digest in sources.items()
            },
        },
    }
    written = write_if_changed(path, dumps_stable(obj))
    return MergedIndex(bucket_dir, sources, len(shards), sum(samples_by_source.values()), written)


def merge_all(mds_root: str) -> list[MergedIndex]:
    """Merge every bucket of the tree, in sorted bucket order."""
    return [merge_bucket_index(ref.dir(mds_root)) for ref in list_buckets(mds_root)]


def merged_source_digests(index_obj: dict) -> dict[str, str]:
    """The per-source digests recorded in a merged index object ({} if not a merged index)."""
    sources = (index_obj.get("prx") or {}).get("sources") or {}
    return {name: entry["index_sha256"] for name, entry in sources.items()}


def check_merged_fresh(bucket_dir: str) -> None:
    """Raise ``StaleIndexError`` when a source was (re)exported after the merge."""
    path = os.path.join(bucket_dir, INDEX_BASENAME)
    with open(path, "rb") as handle:
        recorded = merged_source_digests(json.loads(handle.read()))
    current = source_index_digests(bucket_dir)
    if recorded != current:
        changed = sorted(set(recorded.items()) ^ set(current.items()))
        names = sorted({name for name, _ in changed})
        raise StaleIndexError(f"{path} is stale for sources {names}: re-run the corpus index merge")
