"""Read a source's published shards back: their index entries, and samples by placement.

An incremental export re-uses what it encoded before: a changed caption is written with the
JPEG bytes already in the old shard (no decode, resize or encode), and a bucket rewrite copies
its live samples' bytes from the shards it replaces. Works on local and object-store roots
(a remote shard is fetched once into a scratch folder).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator

from prx_data.core.storage import drop_local_copy, fetch_local, locate, try_read_bytes
from prx_data.export.mds_format import MdsShardReader
from prx_data.export.tree import INDEX_BASENAME, BucketRef, list_buckets


def source_indexes(mds_root: str, source: str, storage_options: dict | None = None) -> dict[BucketRef, dict]:
    """The source's committed ``index.json`` per bucket it has."""
    root = locate(mds_root, storage_options)
    found = {}
    for ref in list_buckets(mds_root, storage_options):
        raw = try_read_bytes(root.child(ref.rel, source, INDEX_BASENAME))
        if raw is not None:
            found[ref] = json.loads(raw)
    return found


def shard_sizes(indexes: dict[BucketRef, dict], source: str) -> dict[str, int]:
    """'<tier>/<HxW>/<source>/<basename>' -> samples, for every shard the indexes list."""
    return {
        f"{ref.rel}/{source}/{info['raw_data']['basename']}": int(info["samples"])
        for ref, index in indexes.items()
        for info in index["shards"]
    }


class ShardReader:
    """Samples of published shards by (shard path relative to the root, index in shard)."""

    def __init__(
        self, mds_root: str, indexes: dict[BucketRef, dict], source: str, scratch: str, storage_options: dict | None = None
    ) -> None:
        self.root = locate(mds_root, storage_options)
        self.scratch = scratch
        self.info = {
            f"{ref.rel}/{source}/{info['raw_data']['basename']}": info for ref, index in indexes.items() for info in index["shards"]
        }

    def read(self, placements: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int, dict]]:
        """Yield (shard, index, sample) for each placement, grouped shard by shard."""
        by_shard: dict[str, list[int]] = defaultdict(list)
        for shard, index in placements:
            by_shard[shard].append(int(index))
        for shard in sorted(by_shard):
            info = self.info.get(shard)
            if info is None:
                raise KeyError(f"shard {shard} is not in the source's index")
            # A remote shard is fetched, read, and dropped (reads seek within the file).
            loc = self.root.child(*shard.split("/"))
            path = fetch_local(loc, self.scratch)
            try:
                with MdsShardReader(path, info) as reader:
                    for index in sorted(by_shard[shard]):
                        yield shard, index, reader[index]
            finally:
                drop_local_copy(loc, path)
