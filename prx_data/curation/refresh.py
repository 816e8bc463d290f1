"""Bring the exclusions up to date over the current export, without re-exporting anything: the
one sequence behind the ``skip_lists`` and ``corpus_report`` assets and ``prx-data optout apply``
(``refresh``, which first resolves the opt-out folder).

1. ``rebuild_skip_lists``: compute the skips (duplicates, excluded labels, opt-outs), fold sparse
   buckets when the policy is on (it adds 'folded' skips: skip lists without them would let
   folded originals back in), write the per-shard sidecars, then publish the bucket indexes again so the buckets a trainer sees follow
   the current skip lists (that merge also collects garbage past ``retention_s``: the
   retention counts from when a shard stopped being published, so a run's second merge
   deletes nothing its first one spared, ``export.retention``); then rebuild every ablation
   view of the views folder over the same state (``curation.view_build``), so views follow the
   corpus in the same run.
2. ``write_data_card``: the data card over the same state.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import EXCLUDE_LABELS, SHARD_RETENTION_DAYS
from prx_data.curation.optout.requests import OptOutReport, apply_requests
from prx_data.export.corpus_index import merge_all
from prx_data.export.skiplist import SkiplistReport
from prx_data.imaging.buckets import BucketConfig

if TYPE_CHECKING:  # fold pulls in streaming (torch): imported where it runs, below
    from prx_data.curation.fold import FoldReport
    from prx_data.curation.view_build import ViewsBuilt


@dataclass
class SkipListsRebuilt:
    exported_samples: int  # exported placements (rows with a shard) the skips were computed over
    skipped_samples: int  # distinct samples skipped: one skipped for two reasons counts once
    skipped_per_source: dict[str, int]  # the same, per source
    report: SkiplistReport  # sidecars written / unchanged / removed, per-stream shares
    merged: list  # export.corpus_index merge results, one per bucket (published or not)
    folds: FoldReport
    views: ViewsBuilt | None = None  # the ablation views rebuilt after the default cut


def rebuild_skip_lists(
    paths: StoragePaths,
    priorities: Mapping[str, int],
    *,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str],
    min_stream_samples: int,
    dedup_radius: int,
    fold=None,
    writer_cfg=None,
    options: dict | None = None,
    run_id: str | None = None,
    scratch_dir: str | None = None,
    views_dir: str | None = None,
    retention_s: float = SHARD_RETENTION_DAYS * 86400.0,
) -> SkipListsRebuilt:
    """``fold`` is a ``curation.fold.FoldPolicy`` (None: off); its ``min_stream_samples`` is this
    call's, so folding and publication agree on what is sparse. The skip rows (and, with the
    fold policy on, the placements) are spilled under ``scratch_dir`` (``export.skiplist.SpilledSkips``,
    ``curation.exclusion.SpilledPlacements``) and read a bucket or a sample-id range at a time.
    ``views_dir``: the ablation views folder; every view in it is rebuilt after the default cut
    (a bad view file is reported in ``views.errors``; the others are built), and views whose
    file left it are retired. None: views are left as they are."""
    # lazy: fold pulls in streaming (torch) through export.mds_writer; exclusion pulls in lance
    from prx_data.curation.exclusion import PLACEMENT_SCHEMA, SpilledPlacements, exported_row_count, scan_skips, write_skip_lists
    from prx_data.curation.fold import FoldPolicy, fold_sparse_buckets
    from prx_data.export.skiplist import SpilledSkips

    policy = replace(fold or FoldPolicy(), min_stream_samples=min_stream_samples)
    folding = policy.enabled and policy.min_stream_samples > 1
    with tempfile.TemporaryDirectory(prefix="prx-skips-", dir=scratch_dir) as folder:
        skips = SpilledSkips(os.path.join(folder, "skips"), expected_rows=exported_row_count(paths, priorities, options))
        # The placements are kept only for the fold plan; with the policy off it reads none.
        placements = SpilledPlacements(os.path.join(folder, "placements"), PLACEMENT_SCHEMA) if folding else None
        scan = scan_skips(
            paths,
            priorities,
            bucket_cfg=bucket_cfg,
            exclude_labels=tuple(exclude_labels),
            options=options,
            dedup_radius=dedup_radius,
            scratch_dir=scratch_dir,
            into=skips,
            placements_into=placements,
        )
        skips.close()
        # Off, it still runs: it removes the fold folders a policy once on left behind.
        folded, folds = fold_sparse_buckets(
            paths,
            placements.close() if placements is not None else PLACEMENT_SCHEMA.empty_table(),
            skips,
            sources=priorities,
            bucket_cfg=bucket_cfg,
            writer_cfg=writer_cfg,
            policy=policy,
            options=options,
            run_id=run_id,
        )
        skips.add(folded)  # the folded originals' rows
        del folded
        skips.close()
        report = write_skip_lists(paths.mds_root, skips, options, paths=paths)
        skipped, per_source = skips.distinct_samples()
    # Skips changed: publish again, so the buckets a trainer sees follow the current skip lists.
    merged = merge_all(paths.mds_root, options, min_stream_samples=min_stream_samples, gc_min_age_s=retention_s)
    views = None
    if views_dir is not None:
        from prx_data.curation.view_build import build_views

        views = build_views(
            paths,
            views_dir,
            priorities,
            bucket_cfg=bucket_cfg,
            exclude_labels=tuple(exclude_labels),
            dedup_radius=dedup_radius,
            options=options,
            scratch_dir=scratch_dir,
        )
    return SkipListsRebuilt(
        exported_samples=scan.exported,
        skipped_samples=skipped,
        skipped_per_source=per_source,
        report=report,
        merged=merged,
        folds=folds,
        views=views,
    )


def write_data_card(
    paths: StoragePaths,
    sources: Iterable[str],
    *,
    exclude_labels: Iterable[str],
    options: dict | None = None,
    views: Iterable[str] = (),
    bucket_cfg=None,
):
    """(card, where it was written) for the current export of ``sources``; ``bucket_cfg`` is the
    export's (its tiers and grid ratios mark the charts). Each of ``views`` (built ablation views)
    gets its own card beside it (``<mds>/_reports/views/<name>.md``)."""
    # lazy: pulls in lance
    from prx_data.curation.report import build_data_card

    card = build_data_card(paths, sorted(sources), exclude_labels=tuple(exclude_labels), options=options, bucket_cfg=bucket_cfg)
    for view in views:
        build_data_card(
            paths, sorted(sources), exclude_labels=tuple(exclude_labels), options=options, view=view, bucket_cfg=bucket_cfg
        ).write(paths.mds_root, options)
    return card, card.write(paths.mds_root, options)


@dataclass
class Applied:
    """What ``refresh`` did: requests resolved, skip lists rebuilt, data card written."""

    optouts: OptOutReport
    skipped_samples: int
    sidecars_written: int
    build_id: str | None
    card_path: str | None
    seconds: float
    views: ViewsBuilt | None = None


def refresh(
    paths: StoragePaths,
    optout_dir: str,
    priorities: dict[str, int],
    *,
    bucket_cfg=None,
    exclude_labels=EXCLUDE_LABELS,
    options: dict | None = None,
    write_card: bool = True,
    min_stream_samples: int = 1,
    dedup_radius: int | None = None,
    fold=None,
    views_dir: str | None = None,
    retention_s: float = SHARD_RETENTION_DAYS * 86400.0,
) -> Applied:
    """Apply the opt-out folder now: resolve requests, rebuild the skip lists over the current
    export and refresh the data card. Nothing is re-exported, so this takes seconds.
    ``views_dir``: the ablation views rebuilt with the default cut (see ``rebuild_skip_lists``)."""
    # lazy: pulls in lance
    from prx_data.curation.exclusion import DEFAULT_DEDUP_RADIUS, RecordedSkiplistReport

    started = time.perf_counter()
    sources = sorted(priorities)
    report = apply_requests(paths, optout_dir, sources, options)
    rebuilt = rebuild_skip_lists(
        paths,
        priorities,
        bucket_cfg=bucket_cfg or BucketConfig(),
        exclude_labels=exclude_labels,
        min_stream_samples=min_stream_samples,
        dedup_radius=DEFAULT_DEDUP_RADIUS if dedup_radius is None else dedup_radius,
        fold=fold,
        options=options,
        views_dir=views_dir,
        retention_s=retention_s,
    )
    views = sorted(rebuilt.views.built) if rebuilt.views is not None else []
    card_path = write_data_card(paths, sources, exclude_labels=exclude_labels, options=options, views=views)[1] if write_card else None
    return Applied(
        optouts=report,
        skipped_samples=rebuilt.skipped_samples,
        sidecars_written=rebuilt.report.written,
        build_id=rebuilt.report.build_id if isinstance(rebuilt.report, RecordedSkiplistReport) else None,
        card_path=card_path,
        seconds=time.perf_counter() - started,
        views=rebuilt.views,
    )
