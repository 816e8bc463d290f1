"""Bring the exclusions up to date over the current export, without re-exporting anything: the
one sequence behind the ``skip_lists`` and ``corpus_report`` assets and ``prx-data optout apply``
(``optout.refresh``).

1. ``rebuild_skip_lists``: compute the skips (duplicates, excluded labels, opt-outs), write the
   per-shard sidecars, then publish the bucket indexes again so the buckets a trainer sees follow
   the current skip lists.
2. ``write_data_card``: the data card over the same state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from prx_data.imaging.buckets import BucketConfig
from prx_data.paths import StoragePaths


@dataclass
class SkipListsRebuilt:
    exports: pa.Table  # every exported sample the skips were computed over
    skips: pa.Table  # one row per (sample, shard, reason)
    report: object  # export.skiplist.SkiplistReport: sidecars written / unchanged / removed, per-stream shares
    merged: list  # export.corpus_index merge results, one per bucket (published or not)

    @property
    def skipped_samples(self) -> int:
        """Distinct samples skipped: a sample skipped for two reasons counts once."""
        return len(set(self.skips.column("sample_id").to_pylist()))


def rebuild_skip_lists(
    paths: StoragePaths,
    priorities: Mapping[str, int],
    *,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str],
    min_stream_samples: int,
    options: dict | None = None,
) -> SkipListsRebuilt:
    from prx_data.export.corpus_index import merge_all
    from prx_data.stages.exclusion import compute_skips, write_skip_lists

    exports, skips = compute_skips(paths, priorities, bucket_cfg=bucket_cfg, exclude_labels=tuple(exclude_labels), options=options)
    report = write_skip_lists(paths.mds_root, skips, options, paths=paths)
    # Skips changed: publish again, so the buckets a trainer sees follow the current skip lists.
    merged = merge_all(paths.mds_root, options, min_stream_samples=min_stream_samples)
    return SkipListsRebuilt(exports=exports, skips=skips, report=report, merged=merged)


def write_data_card(paths: StoragePaths, sources: Iterable[str], *, exclude_labels: Iterable[str], options: dict | None = None):
    """(card, where it was written) for the current export of ``sources``."""
    from prx_data.report import build_data_card

    card = build_data_card(paths, sorted(sources), exclude_labels=tuple(exclude_labels), options=options)
    return card, card.write(paths.report_dir(), options)
