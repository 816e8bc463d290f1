"""The MDS tree's layout: ``<mds root>/<tier>/<height>x<width>/<source>/<run>.<tag>.shard.NNNNN.mds``
plus the source's ``index.json`` (what readers resolve; ``export.commit`` writes it).

The one module that names what lives under the MDS root (``core/paths.py`` names what lives
under the Lance root): every file and folder name below is spelled here only
(``prx_data_tests/test_storage_names.py``), and the bucket and source folders are made here.
It also lists the tree. Source names never contain a dot (registry rule), so a folder name with
a dot is never a source (older releases left ``<source>.staging-<run>`` folders).

``list_buckets`` and ``list_sources`` take a local folder or an ``s3://`` / ``gs://`` root alike
(with the same ``storage_options`` as Lance): an object store has no folders, only prefixes, so a
"folder" there is a prefix that holds at least one object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.storage import is_file, join, list_dir, locate

SOURCE_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")
BUCKET_RE = re.compile(r"^(\d+)x(\d+)$")
TIER_RE = re.compile(r"^\d+$")
SHARD_KEYS = ("raw_data", "zip_data")  # the file entries of one shard in an MDS index

# In a bucket folder and its source folders.
INDEX_BASENAME = "index.json"  # a source's index; in a published bucket, the merged one
SKIPLIST_MANIFEST_BASENAME = "skiplists.json"  # a bucket's skip-list manifest (export.skiplist)
SKIP_INFIX = ".skip."  # '<shard>.skip.<reason token>.json': a sidecar of samples to skip
UNPUBLISHED_BASENAME = "unpublished.json"  # not '*_index.json': PRX reads those as streams
SUPERSEDED_BASENAME = "superseded.json"  # what stopped being published, and when (export.retention)
SUPERSEDED_DIR = "_superseded"  # 'index.<stamp>.<digest>.json': replaced merged indexes, kept a while
FOLD_SUFFIX = "--fold"  # '<source>--fold': a sparse bucket's images folded into this shape
# At the MDS root, beside the tier folders (none is a number, so no listing takes it for a tier).
RETIRED_BUCKETS_BASENAME = "retired_buckets.json"  # buckets every source left (export.corpus_index)
COMMITS_DIR = "_commits"  # '<source>.json': the export journal; '<source>.<run>.running': a run in flight
RUNNING_SUFFIX = ".running"
RETIRED_DIR = "_retired"  # '<source>/<stamp>/<tier>/<HxW>/': a retired source's shards
RETIRE_RECEIPT_BASENAME = "receipt.json"  # beside them: what moved where
REPORTS_DIR = "_reports"
DATA_CARD_BASENAME = "data_card.md"
# Ablation views (curation.views): a view's files sit beside the default cut's, under names of
# their own, so the default build never lists, counts or removes them.
VIEW_NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
VIEW_PREFIX = "view-"  # '<shard>.view-<name>.<reason token>.json', 'skiplists.view-<name>.json'
VIEWS_DIR = "_views"  # at the MDS root: '<name>.json', a view's build record
VIEW_REPORTS_DIR = "views"  # under REPORTS_DIR: '<name>.md', a view's data card
CARD_CHARTS_DIR = "charts"  # '<name>.png' beside the card, linked from it as 'charts/<name>.png'
CARD_FIGURES_BASENAME = "card_figures.json"  # the numbers the charts are drawn from


def running_marker_name(source: str, run_id: str) -> str:
    return f"{source}.{run_id}{RUNNING_SUFFIX}"


def staged_index_name(run_id: str) -> str:
    return f"{run_id}.{INDEX_BASENAME}"


def journal_name(source: str) -> str:
    return f"{source}.json"


def retired_source_dir(mds_root: str, source: str, stamp: str) -> str:
    return join(mds_root, RETIRED_DIR, source, stamp)


def superseded_index_name(stamp: str, digest: str) -> str:
    """A replaced merged index's copy, relative to its bucket (never '*_index.json' or 'index.json')."""
    return f"{SUPERSEDED_DIR}/index.{stamp}.{digest[:12]}.json"


def data_card_path(mds_root: str) -> str:
    return join(mds_root, REPORTS_DIR, DATA_CARD_BASENAME)


def view_sidecar_infix(view: str) -> str:
    """The infix of a view's sidecars, in place of ``SKIP_INFIX``."""
    return f".{VIEW_PREFIX}{check_view_name(view)}."


def view_manifest_name(view: str) -> str:
    """A bucket's manifest of a view's sidecars, beside ``skiplists.json``."""
    stem, ext = SKIPLIST_MANIFEST_BASENAME.rsplit(".", 1)
    return f"{stem}.{VIEW_PREFIX}{check_view_name(view)}.{ext}"


def view_record_path(mds_root: str, view: str) -> str:
    return join(mds_root, VIEWS_DIR, f"{check_view_name(view)}.json")


def view_card_path(mds_root: str, view: str) -> str:
    return join(mds_root, REPORTS_DIR, VIEW_REPORTS_DIR, f"{check_view_name(view)}.md")


def check_view_name(view: str) -> str:
    if not VIEW_NAME_RE.fullmatch(view):
        raise ValueError(f"invalid view name {view!r}: lowercase letters, digits, '-', '_' only")
    return view


def card_chart_rel(name: str) -> str:
    """A chart's path relative to the data card (the link the card's Markdown holds)."""
    return f"{CARD_CHARTS_DIR}/{name}.png"


def card_chart_path(mds_root: str, name: str) -> str:
    return join(mds_root, REPORTS_DIR, card_chart_rel(name))


def card_figures_path(mds_root: str) -> str:
    return join(mds_root, REPORTS_DIR, CARD_FIGURES_BASENAME)


def check_source(source: str) -> str:
    if not SOURCE_RE.fullmatch(source):
        raise ValueError(f"invalid source name {source!r}: lowercase letters, digits, '-', '_' only")
    return source


def bucket_key(height: int, width: int) -> str:
    return f"{int(height)}x{int(width)}"


def parse_bucket(bucket: str) -> tuple[int, int]:
    match = BUCKET_RE.fullmatch(bucket)
    if not match:
        raise ValueError(f"invalid bucket {bucket!r}, expected '<height>x<width>'")
    return int(match.group(1)), int(match.group(2))


def shard_buckets(shards: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The bucket (``<tier>/<HxW>``: a shard path's first two parts) of each shard path; null
    where the path has fewer parts."""
    return pc.struct_field(pc.extract_regex(shards, r"^(?P<bucket>[^/]+/[^/]+)/"), "bucket")


def bucket_rels(placements: pa.Table) -> pa.Array:
    """``<tier>/<bucket>`` of every placement (its ``tier`` and ``bucket`` columns): the bucket's
    path in the tree."""
    rel = pc.binary_join_element_wise(pc.cast(placements["tier"], pa.string()), placements["bucket"], "/")
    return rel.combine_chunks() if isinstance(rel, pa.ChunkedArray) else rel


def placed_buckets(placements: pa.Table) -> pa.Array:
    """``bucket_rels`` of the placements that have a shard; null for one never placed (in no bucket)."""
    return pc.if_else(pc.is_valid(placements["shard"]), bucket_rels(placements), pa.scalar(None, pa.string()))


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
        return join(mds_root, str(self.tier), self.bucket)

    def source_dir(self, mds_root: str, source: str) -> str:
        return join(self.dir(mds_root), source)


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
