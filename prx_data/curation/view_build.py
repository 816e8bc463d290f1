"""Build an ablation view's cut as sidecars beside the default cut's, never as copies.

A view's skip rows are the default rules recomputed for the view, plus its own:

* the exports of the view's included sources are scanned once (``curation.exclusion.scan_skips``)
  with the view's labels (the default ones it does not re-admit, plus its own) and its dedup
  radius; dedup decides among the rows the view keeps only (``keep``), so a picture an excluded
  source or rule held is kept from the next included copy, by the usual priority order;
* every placement of an excluded source, and every row a view rule leaves out (tier, bucket,
  caption length, ``where``) is skipped with a reason of its own (``view:<rule>``);
* opt-outs are matched as in the default cut and can never be re-admitted; ``superseded``
  placements stay skipped; a sample the fold policy re-exported keeps its ``folded`` original
  skipped, and its folded copy is skipped whenever the view skips the sample.

The rows go to ``export.skiplist.build_skiplists`` under the view's names (``view_names``): per
shard one sidecar per reason, per bucket a manifest, in the same format the loader checks. A
record at ``<mds>/_views/<name>.json`` says what the view was built from (its file's sha256, each
bucket's default manifest) so the loader can refuse a stale view.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.storage import delete_file, glob_files, locate, try_read_bytes, write_if_changed
from prx_data.curation.view_where import parse_predicate
from prx_data.curation.views import RECORD_FORMAT, RECORD_VERSION, RULE_REASONS, View, ViewError, check_view, load_views
from prx_data.export._fs import dumps_stable, sha256_bytes
from prx_data.export.skiplist import SkiplistReport, SpilledSkips, as_skip_rows, build_skiplists, iter_root_sidecars, view_names
from prx_data.export.tree import INDEX_BASENAME, SKIPLIST_MANIFEST_BASENAME, VIEWS_DIR, bucket_rels, list_buckets, view_record_path
from prx_data.imaging.buckets import BucketConfig

_NOT_MAPPED = ("superseded", "folded")  # reasons of a placement, not of the sample: not carried to a folded copy


class ViewSkips(SpilledSkips):
    """A view's skip rows: ``dedup`` rows dropped when the view re-admits dedup, and every
    row of a sample with a folded copy repeated for that copy."""

    def __init__(self, folder: str, *, readmit_dedup: bool, copies: pa.Table, expected_rows: int = 0):
        super().__init__(folder, expected_rows=expected_rows)
        self.readmit_dedup = readmit_dedup
        self.copies = copies  # sample_id, source, shard, index_in_shard of each folded copy

    def add(self, table: pa.Table) -> None:
        rows = as_skip_rows(table)
        if self.readmit_dedup and rows.num_rows:
            rows = rows.filter(pc.not_equal(rows["reason"], "dedup"))
        if not rows.num_rows:
            return
        super().add(rows)
        if self.copies.num_rows:
            carried = rows.filter(pc.invert(pc.is_in(rows["reason"], value_set=pa.array(_NOT_MAPPED))))
            mapped = carried.select(["sample_id", "reason", "kept_sample_id"]).join(
                self.copies, "sample_id", join_type="inner", use_threads=False
            )
            if mapped.num_rows:
                super().add(mapped)


def _caption_words(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    words = pc.list_value_length(pc.utf8_split_whitespace(pc.fill_null(column, "")))
    return pc.fill_null(words, 0)


def _rule_ids(paths: StoragePaths, source: str, view: View, options: dict | None) -> dict[str, pa.Array]:
    """reason -> sample ids of ``source``'s rows a caption or ``where`` rule leaves out."""
    rules = view.spec.exclude
    wants_caption = rules.min_caption_words is not None or rules.max_caption_words is not None
    predicate = parse_predicate(rules.where) if rules.where is not None else None
    if not wants_caption and predicate is None:
        return {}
    ds = open_table(paths.raw_table(source), options)
    if ds is None:
        return {}
    names = set(ds.schema.names)
    wanted = {"sample_id"}
    if wants_caption and "caption" in names:
        wanted.add("caption")
    where_ok = predicate is not None and predicate.columns <= names
    if where_ok and predicate is not None:
        wanted |= predicate.columns
    found: dict[str, list[pa.Array]] = {}
    for batch in ds.to_batches(columns=sorted(wanted), filter="status = 'ok'", batch_size=1 << 16):
        table = pa.Table.from_batches([batch])
        ids = table["sample_id"]
        if wants_caption:
            words = _caption_words(table["caption"]) if "caption" in table.column_names else pa.array([0] * table.num_rows, pa.int32())
            if rules.min_caption_words is not None:
                found.setdefault(RULE_REASONS["min_caption_words"], []).append(ids.filter(pc.less(words, rules.min_caption_words)))
            if rules.max_caption_words is not None:
                found.setdefault(RULE_REASONS["max_caption_words"], []).append(ids.filter(pc.greater(words, rules.max_caption_words)))
        if predicate is not None:
            if where_ok:
                kept = table.filter(predicate.expression)["sample_id"]
                found.setdefault(RULE_REASONS["where"], []).append(ids.filter(pc.invert(pc.is_in(ids, value_set=kept))))
            else:  # a source without the predicate's columns: null, so not kept
                found.setdefault(RULE_REASONS["where"], []).append(ids)
    return {reason: pa.chunked_array(parts, pa.string()).combine_chunks() for reason, parts in found.items()}


def _rule_filter(paths: StoragePaths, view: View, options: dict | None, emit: Callable[[pa.Table], None]) -> Callable[[pa.Table], pa.Table]:
    """The ``keep`` of the view's scan: emits a row per placement and rule the view leaves out,
    returns the rest (what dedup decides among). Rule ids are read a source at a time."""
    rules = view.spec.exclude
    tiers = pa.array(rules.tiers, pa.int32())
    full = pa.array([b for b in rules.buckets if "/" in b], pa.string())
    shapes = pa.array([b for b in rules.buckets if "/" not in b], pa.string())
    state: dict[str, object] = {"source": None, "ids": {}}

    def keep(batch: pa.Table) -> pa.Table:
        if not batch.num_rows:
            return batch
        masks: dict[str, pa.Array] = {}
        if len(tiers):
            masks[RULE_REASONS["tiers"]] = pc.is_in(batch["tier"], value_set=tiers)
        if len(full) or len(shapes):
            masks[RULE_REASONS["buckets"]] = pc.or_(
                pc.is_in(bucket_rels(batch), value_set=full), pc.is_in(batch["bucket"], value_set=shapes)
            )
        source = batch["source"][0].as_py()
        if state["source"] != source:  # exported_batches yields one source after another
            state["source"], state["ids"] = source, _rule_ids(paths, source, view, options)
        ids: dict[str, pa.Array] = state["ids"]  # type: ignore[assignment]
        for reason, excluded in ids.items():
            masks[reason] = pc.is_in(batch["sample_id"], value_set=excluded)
        if not masks:
            return batch
        out = None
        for reason, mask in masks.items():
            mask = pc.fill_null(mask, False)
            hit = batch.filter(mask)
            if hit.num_rows:
                emit(
                    hit.select(["sample_id", "source", "shard", "index_in_shard"]).append_column(
                        "reason", pa.array([reason] * hit.num_rows, pa.string())
                    )
                )
            out = mask if out is None else pc.or_(out, mask)
        assert out is not None
        return batch.filter(pc.invert(out))

    return keep


def _folded_originals(mds_root: str, options: dict | None) -> pa.Table:
    """The default cut's ``folded`` rows: a view keeps the fold layout (it never re-exports)."""
    # lazy: fold pulls in streaming (torch)
    from prx_data.curation.fold import FOLDED

    rows: dict[str, list] = {"sample_id": [], "source": [], "shard": [], "index_in_shard": []}
    for sidecar in iter_root_sidecars(mds_root, options):
        if sidecar.reason != FOLDED:
            continue
        folder = sidecar.path.rsplit("/", 1)[0]
        n = len(sidecar.indices)
        rows["sample_id"] += sidecar.sample_ids
        rows["source"] += [folder.split("/")[2]] * n
        rows["shard"] += [f"{folder}/{sidecar.shard}"] * n
        rows["index_in_shard"] += sidecar.indices.tolist()
    table = pa.table({k: pa.array(v, pa.int64() if k == "index_in_shard" else pa.string()) for k, v in rows.items()})
    return table.append_column("reason", pa.array([FOLDED] * table.num_rows, pa.string()))


def _fold_copies(paths: StoragePaths, sources: Iterable[str], options: dict | None) -> pa.Table:
    from prx_data.curation.fold import read_folds

    folds = read_folds(paths, sources, options)
    copy_source = pc.struct_field(pc.extract_regex(folds["shard"], r"^[^/]+/[^/]+/(?P<s>[^/]+)/"), "s")
    return pa.table(
        {"sample_id": folds["sample_id"], "source": copy_source, "shard": folds["shard"], "index_in_shard": folds["index_in_shard"]}
    )


@dataclass
class ViewBuilt:
    view: str
    exported: int  # placements of the corpus the view was decided over
    skipped: int  # distinct samples the view skips
    trainable: int  # samples of the tree minus those skipped
    per_rule: dict[str, int]  # skipped placements per rule ('optout' for every request)
    per_source: dict[str, int]  # distinct skipped samples per source
    buckets: dict[str, dict[str, int]]  # '<tier>/<HxW>' -> samples, skipped
    report: SkiplistReport
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    record_path: str = ""


def _rule_of(reason: str) -> str:
    return "optout" if reason.startswith("optout:") else reason


def build_view(
    paths: StoragePaths,
    view: View,
    priorities: Mapping[str, int],
    *,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str],
    dedup_radius: int,
    options: dict | None = None,
    scratch_dir: str | None = None,
    known_labels: Iterable[str] = (),
) -> ViewBuilt:
    """Write ``view``'s sidecars, manifests and build record; ``ViewError`` (nothing written)
    when the file does not fit the corpus (a ``where`` column no included source has)."""
    # lazy: exclusion pulls in lance
    from prx_data.curation.exclusion import exported_batches, exported_row_count, scan_skips, superseded_batches

    started = time.perf_counter()
    rules = view.spec.exclude
    tree = [ref.rel for ref in list_buckets(paths.mds_root, options)]
    columns = {}
    for source in priorities:
        ds = open_table(paths.raw_table(source), options)
        columns[source] = set(ds.schema.names) if ds is not None else set()
    warnings = check_view(view, sources=priorities, labels={*exclude_labels, *known_labels}, buckets=tree, columns=columns)
    included = {s: p for s, p in priorities.items() if s not in set(rules.sources)}
    excluded = {s: p for s, p in priorities.items() if s in set(rules.sources)}
    copies = _fold_copies(paths, priorities, options)
    with tempfile.TemporaryDirectory(prefix=f"prx-view-{view.name}-", dir=scratch_dir) as folder:
        skips = ViewSkips(
            os.path.join(folder, "skips"),
            readmit_dedup=view.readmit_dedup,
            copies=copies,
            expected_rows=exported_row_count(paths, priorities, options),
        )
        scan = scan_skips(
            paths,
            included,
            bucket_cfg=bucket_cfg,
            exclude_labels=view.labels(exclude_labels),
            options=options,
            dedup_radius=dedup_radius if rules.dedup_radius is None else rules.dedup_radius,
            scratch_dir=scratch_dir,
            into=skips,
            keep=_rule_filter(paths, view, options, skips.add),
        )
        exported = scan.exported
        if excluded:
            _, batches = exported_batches(paths, excluded, options)
            reason = RULE_REASONS["sources"]
            for batch in batches:
                exported += batch.num_rows
                placed = batch.select(["sample_id", "source", "shard", "index_in_shard"])
                skips.add(placed.append_column("reason", pa.array([reason] * placed.num_rows, pa.string())))
            for rows in superseded_batches(paths, excluded, options):
                skips.add(rows.set_column(rows.schema.get_field_index("reason"), "reason", pa.array([reason] * rows.num_rows, pa.string())))
        skips.add(_folded_originals(paths.mds_root, options))
        skips.close()
        report = build_skiplists(skips, paths.mds_root, storage_options=options, names=view_names(view.name))
        skipped, per_source = skips.distinct_samples()
    per_rule: dict[str, int] = {}
    for reason, count in zip(report.counts["reason"].to_pylist(), report.counts["skipped"].to_pylist()):
        per_rule[_rule_of(reason)] = per_rule.get(_rule_of(reason), 0) + count
    buckets = {
        rel: {"samples": samples, "skipped": skip}
        for rel, samples, skip in zip(
            report.streams["bucket"].to_pylist(), report.streams["samples"].to_pylist(), report.streams["skipped"].to_pylist()
        )
    }
    root = locate(paths.mds_root, options)
    for rel, counts in buckets.items():
        left = counts["samples"] - counts["skipped"]
        if left and try_read_bytes(root.child(rel, INDEX_BASENAME)) is None:
            warnings.append(
                f"view {view.name}: bucket {rel} holds {left} sample(s) of this view but the default cut does not publish it "
                "(too few samples there): the view does not train them"
            )
    built = ViewBuilt(
        view=view.name,
        exported=exported,
        skipped=skipped,
        trainable=sum(b["samples"] - b["skipped"] for b in buckets.values()),
        per_rule=dict(sorted(per_rule.items())),
        per_source=per_source,
        buckets=buckets,
        report=report,
        warnings=warnings,
    )
    built.seconds = time.perf_counter() - started
    built.record_path = write_record(paths.mds_root, view, built, options)
    return built


def default_manifests(mds_root: str, options: dict | None = None) -> dict[str, str]:
    """'<tier>/<HxW>' -> sha256 of the bucket's default manifest, for each bucket that has one."""
    root = locate(mds_root, options)
    out = {}
    for ref in list_buckets(mds_root, options):
        data = try_read_bytes(root.child(ref.rel, SKIPLIST_MANIFEST_BASENAME))
        if data is not None:
            out[ref.rel] = sha256_bytes(data)
    return out


def write_record(mds_root: str, view: View, built: ViewBuilt, options: dict | None = None) -> str:
    record = {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "name": view.name,
        "file_sha256": view.sha256,
        "spec": view.spec.model_dump(mode="json"),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(built.seconds, 3),
        "base_manifests": default_manifests(mds_root, options),
        "exported": built.exported,
        "skipped": built.skipped,
        "trainable": built.trainable,
        "per_rule": built.per_rule,
        "per_source": built.per_source,
        "buckets": built.buckets,
        "warnings": built.warnings,
    }
    path = view_record_path(mds_root, view.name)
    write_if_changed(locate(path, options), dumps_stable(record))
    return path


def built_views(mds_root: str, options: dict | None = None) -> list[str]:
    """Names of the views with a build record under ``mds_root``."""
    folder = locate(mds_root, options).child(VIEWS_DIR)
    return sorted(name.removesuffix(".json") for name in glob_files(folder, "*.json"))


def retire_view(mds_root: str, name: str, options: dict | None = None) -> int:
    """Remove a view's sidecars, manifests and record (its file left the folder); files removed."""
    names = view_names(name)
    root = locate(mds_root, options)
    removed = 0
    for ref in list_buckets(mds_root, options):
        bucket = root.child(ref.rel)
        for rel in [*glob_files(bucket, names.glob, recursive=True), names.manifest]:
            if try_read_bytes(bucket.child(*rel.split("/"))) is not None:
                delete_file(bucket.child(*rel.split("/")))
                removed += 1
    record = locate(view_record_path(mds_root, name), options)
    if try_read_bytes(record) is not None:
        delete_file(record)
        removed += 1
    return removed


@dataclass
class ViewsBuilt:
    built: dict[str, ViewBuilt] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # file or view -> why it was not built
    retired: list[str] = field(default_factory=list)


def build_views(
    paths: StoragePaths,
    views_dir: str,
    priorities: Mapping[str, int],
    *,
    only: Iterable[str] | None = None,
    bucket_cfg: BucketConfig,
    exclude_labels: Iterable[str],
    dedup_radius: int,
    options: dict | None = None,
    scratch_dir: str | None = None,
    retire: bool = True,
) -> ViewsBuilt:
    """Every view of ``views_dir`` (or those named in ``only``); a bad one is in ``errors`` and
    the others are built. With ``retire``, views built earlier whose file is gone are removed."""
    found = load_views(views_dir)
    out = ViewsBuilt(errors=dict(found.errors))
    wanted = set(found.views) if only is None else set(only)
    for name in sorted(wanted - set(found.views)):
        if not any(os.path.splitext(os.path.basename(p))[0] == name for p in found.errors):
            out.errors[name] = f"no view named {name!r} in {views_dir} (views: {', '.join(sorted(found.views)) or 'none'})"
    for name in sorted(wanted & set(found.views)):
        try:
            out.built[name] = build_view(
                paths,
                found.views[name],
                priorities,
                bucket_cfg=bucket_cfg,
                exclude_labels=exclude_labels,
                dedup_radius=dedup_radius,
                options=options,
                scratch_dir=scratch_dir,
            )
        except ViewError as exc:
            out.errors[found.views[name].path] = str(exc)
    if retire and only is None:
        defined = set(found.views) | {os.path.splitext(os.path.basename(p))[0] for p in found.errors}
        for name in built_views(paths.mds_root, options):
            if name not in defined:
                retire_view(paths.mds_root, name, options)
                out.retired.append(name)
    return out


__all__ = ["ViewBuilt", "ViewSkips", "ViewsBuilt", "build_view", "build_views", "built_views", "retire_view"]
