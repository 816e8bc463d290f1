"""The MDS tree's layout: ``<mds root>/<tier>/<height>x<width>/<source>/<run>.<tag>.shard.NNNNN.mds``
plus the source's ``index.json`` (what readers resolve; ``export.commit`` writes it).

Paths of real folders come from ``prx_data.core.paths``; this module only adds what core/paths.py does
not know: how to list the tree. Source names never contain a dot (registry rule), so a folder
name with a dot is never a source (older releases left ``<source>.staging-<run>`` folders).

``list_buckets`` and ``list_sources`` take a local folder or an ``s3://`` / ``gs://`` root alike
(with the same ``storage_options`` as Lance): an object store has no folders, only prefixes, so a
"folder" there is a prefix that holds at least one object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prx_data.core.paths import StoragePaths
from prx_data.core.storage import is_file, list_dir, locate

SOURCE_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")
BUCKET_RE = re.compile(r"^(\d+)x(\d+)$")
TIER_RE = re.compile(r"^\d+$")
INDEX_BASENAME = "index.json"
SHARD_KEYS = ("raw_data", "zip_data")  # the file entries of one shard in an MDS index


def check_source(source: str) -> str:
    if not SOURCE_RE.fullmatch(source):
        raise ValueError(f"invalid source name {source!r}: lowercase letters, digits, '-', '_' only")
    return source


def mds_paths(mds_root: str) -> StoragePaths:
    # The MDS half of StoragePaths is all we need; lance_root is unused here.
    return StoragePaths(lance_root="", mds_root=mds_root)


def bucket_key(height: int, width: int) -> str:
    return f"{int(height)}x{int(width)}"


def parse_bucket(bucket: str) -> tuple[int, int]:
    match = BUCKET_RE.fullmatch(bucket)
    if not match:
        raise ValueError(f"invalid bucket {bucket!r}, expected '<height>x<width>'")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True, order=True)
class BucketRef:
    tier: int
    height: int
    width: int

    @property
    def bucket(self) -> str:
        return bucket_key(self.height, self.width)

    @property
    def rel(self) -> str:
        """Bucket folder relative to the MDS root ('1024/768x1344')."""
        return f"{self.tier}/{self.bucket}"

    def dir(self, mds_root: str) -> str:
        return mds_paths(mds_root).bucket_dir(self.tier, self.height, self.width)

    def source_dir(self, mds_root: str, source: str) -> str:
        return mds_paths(mds_root).source_stream_dir(self.tier, self.height, self.width, source)


def list_buckets(mds_root: str, storage_options: dict | None = None) -> list[BucketRef]:
    """Every ``<tier>/<HxW>`` folder under the root, sorted (tier, height, width)."""
    root = locate(mds_root, storage_options)
    found = []
    for tier in list_dir(root):
        if not (tier.is_dir and TIER_RE.fullmatch(tier.name)):
            continue
        for bucket in list_dir(root.child(tier.name)):
            match = BUCKET_RE.fullmatch(bucket.name)
            if bucket.is_dir and match:
                found.append(BucketRef(int(tier.name), int(match.group(1)), int(match.group(2))))
    return sorted(found)


def list_sources(bucket_dir: str, storage_options: dict | None = None) -> list[str]:
    """Committed source folders of a bucket (with an index.json), sorted; transient ones skipped."""
    loc = locate(bucket_dir, storage_options)
    return [
        entry.name
        for entry in list_dir(loc)
        if entry.is_dir and SOURCE_RE.fullmatch(entry.name) and is_file(loc.child(entry.name, INDEX_BASENAME))
    ]
