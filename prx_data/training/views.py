"""The training loader's side of ablation views: which buckets a view trains on, and what it skips.

A view is trained only when its build matches the tree: it has a build record, every published
bucket has the view's manifest, built against the current export of each source (the merged
index's digests) and after the bucket's current default cut (the record holds the sha256 of each
bucket's ``skiplists.json``). Anything else is a ``ViewNotReadyError`` naming the view; the
loader never falls back to the default cut. Opt-outs are read from the default cut as well and
unioned in, so no view can yield an opted-out sample whatever its files say.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from prx_data.core.storage import locate, try_read_bytes
from prx_data.curation.views import OPTOUT_PREFIX, SUFFIXES, read_record
from prx_data.export._fs import sha256_bytes
from prx_data.export.corpus_index import merged_source_digests
from prx_data.export.skiplist import DEFAULT_NAMES, MANIFEST_BASENAME, SkiplistError, load_bucket_skips, parse_manifest, view_names
from prx_data.export.tree import INDEX_BASENAME, check_view_name, view_manifest_name


class ViewNotReadyError(ValueError):
    """A view that does not exist, or whose build does not match the tree; names the view."""


def _rebuild(view: str) -> str:
    return f"rebuild it: prx-data views build {view}"


def view_missing(view: str, manifest: str) -> ViewNotReadyError:
    return ViewNotReadyError(f"view {view!r} is not built for this stream: {manifest} is missing; {_rebuild(view)}")


def _check_file(view: str, record: dict, views_dir: str | None) -> None:
    if views_dir is None:
        return
    files = [Path(views_dir) / f"{view}{suffix}" for suffix in SUFFIXES]
    present = [p for p in files if p.is_file()]
    if not present:
        raise ViewNotReadyError(f"view {view!r} has no file in {views_dir} (it was retired): train another view")
    if hashlib.sha256(present[0].read_bytes()).hexdigest() != record.get("file_sha256"):
        raise ViewNotReadyError(f"view {view!r} is stale: {present[0]} changed since the view was built; {_rebuild(view)}")


def view_counts(
    mds_root: str, view: str, buckets: list, storage_options: dict | None = None, views_dir: str | None = None
) -> dict[str, tuple[int, int]]:
    """'<tier>/<HxW>' -> (samples, unskipped under ``view``) of each of ``buckets``
    (``training.loader.BucketStream``); ``ViewNotReadyError`` when the view cannot be trained."""
    check_view_name(view)
    record = read_record(mds_root, view, storage_options)
    if record is None:
        raise ViewNotReadyError(f"view {view!r} has not been built under {mds_root}: build it with prx-data views build {view}")
    _check_file(view, record, views_dir)
    base = record.get("base_manifests", {})
    out = {}
    for bucket in buckets:
        loc = locate(bucket.uri, storage_options)
        default = try_read_bytes(loc.child(MANIFEST_BASENAME))
        if default is not None and base.get(bucket.rel) != sha256_bytes(default):
            raise ViewNotReadyError(
                f"view {view!r} is stale: the default cut of bucket {bucket.rel} changed since the view was built "
                f"(an export, opt-outs or labels); {_rebuild(view)}"
            )
        raw = try_read_bytes(loc.child(view_manifest_name(view)))
        if raw is None:
            raise ViewNotReadyError(f"view {view!r} is stale: bucket {bucket.rel} has no {view_manifest_name(view)}; {_rebuild(view)}")
        manifest = parse_manifest(raw, loc.child(view_manifest_name(view)).uri)
        index = try_read_bytes(loc.child(INDEX_BASENAME))
        digests = merged_source_digests(json.loads(index)) if index is not None else {}
        if digests and dict(manifest.sources) != digests:
            raise ViewNotReadyError(
                f"view {view!r} is stale: it was built before the current export of bucket {bucket.rel}; {_rebuild(view)}"
            )
        out[bucket.rel] = (bucket.samples, bucket.samples - manifest.skipped)
    return out


def view_stream_skips(
    local_dir: str,
    view: str,
    shard_samples: dict[str, int],
    fetch: Callable[[str], str] | None,
    expected_sources: dict[str, str] | None,
) -> dict[str, np.ndarray]:
    """Shard (relative to the bucket) -> sorted skipped indices under ``view``: the view's own
    sidecars, checked as the default cut's are, unioned with the default cut's opt-outs."""
    try:
        skips = load_bucket_skips(
            local_dir, shard_samples=shard_samples, fetch=fetch, expected_sources=expected_sources, names=view_names(view)
        )
    except SkiplistError as exc:
        raise ViewNotReadyError(f"view {view!r} cannot be read: {exc}; {_rebuild(view)}") from None
    parts = {shard: [indices] for shard, indices in skips.skipped.items()}
    has_default = os.path.exists(os.path.join(local_dir, MANIFEST_BASENAME)) if fetch is None else _fetched(fetch, MANIFEST_BASENAME)
    if has_default:
        optouts = load_bucket_skips(
            local_dir, shard_samples=shard_samples, fetch=fetch, names=DEFAULT_NAMES, reasons=lambda r: r.startswith(OPTOUT_PREFIX)
        )
        for shard, indices in optouts.skipped.items():
            parts.setdefault(shard, []).append(indices)
    return {shard: np.unique(np.concatenate(found)) for shard, found in parts.items()}


def _fetched(fetch: Callable[[str], str], rel: str) -> bool:
    try:
        fetch(rel)
    except FileNotFoundError:
        return False
    return True


__all__ = ["ViewNotReadyError", "view_counts", "view_missing", "view_stream_skips"]
