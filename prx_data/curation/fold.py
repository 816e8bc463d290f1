"""Opt-in fold policy: images of sparse buckets are re-exported into a published neighbour.

A bucket with fewer unskipped samples than ``min_stream_samples`` is not published (a trainer
that batches per stream cannot use it). With ``PRX_FOLD_SPARSE_BUCKETS=1`` its unskipped images
are re-exported, cover-cropped with Lanczos to the shape of the nearest bucket of the same tier
that is published on its own (at most ``PRX_FOLD_MAX_STEPS`` aspect-grid steps away, ties to the
squarer shape), and the originals are skipped with the reason ``folded``. The decision is
corpus-wide and made from the same counts publication uses: every source's current placements
minus the current skips (dedup, labels, opt-outs, superseded), before any fold. Targets are only
buckets published without folding, so folds never chain.

Where folded copies live. Each source's copies go to a partition of their own,
``<tier>/<HxW>/<source>--fold/`` (``fold_folder``), written with the same all-or-nothing MDS
writer as the source's export (local and object-store roots alike). The source's own folders,
exports table and shards are never touched: a fold is undone by removing the fold partition's
bucket, and the original comes back by losing its ``folded`` skip. ``corpus_index`` merges the
fold folder into the target bucket's stream like any source; the ``source`` column of a folded
sample says ``<source>--fold``.

Lineage: ``exports/<source>.folds.lance`` records each folded copy (its shard and index, the
bucket it was folded from, and the ``image_key`` / ``meta_key`` of the placement it was made from).
Each row also carries the sha256 of the fold folder's ``index.json`` it was committed with: rows
of a bucket whose index no longer has that digest (a run killed between its MDS commit and its
table write) are not trusted, and that bucket is written again.

Incremental: a target bucket's fold folder is rewritten only when the set of samples it should
hold (or their image / caption keys) changed; copies it keeps are written with their old JPEG
bytes, so only new or changed images are decoded and encoded. A run with nothing new writes
nothing. A bucket that later gets enough samples of its own is no longer sparse: its copies are
removed from the target and its originals lose the ``folded`` skip. A sample that gets skipped
(dedup, label, opt-out) is not folded, and its copy is removed the same way. Turning the policy
off removes every fold folder on the next ``skip_lists`` run.
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import STATUS_OK, all_of, one_of
from prx_data.core.lance_io import open_table
from prx_data.core.locking import table_lock
from prx_data.core.paths import StoragePaths
from prx_data.core.spill import RowsByKey, TableByKey
from prx_data.core.storage import locate, try_read_bytes
from prx_data.export._fs import sha256_bytes
from prx_data.export.mds_writer import MdsWriterConfig, write_partition
from prx_data.export.reuse import ShardReader
from prx_data.export.skiplist import SKIP_SCHEMA
from prx_data.export.tree import (
    FOLD_SUFFIX,
    INDEX_BASENAME,
    SOURCE_RE,
    BucketRef,
    bucket_rels,
    list_buckets,
    list_sources,
    parse_bucket,
    shard_buckets,
)
from prx_data.imaging import transform  # called as transform.prepare (tests count its calls)
from prx_data.imaging.buckets import Assignment, BucketConfig, Drop, fold_target, shape_index, shapes_for_tier
from prx_data.stages.column_stage import read_images

FOLDED = "folded"  # skip reason of an original whose image is trained from its folded copy

FOLDS_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # the sample's own source
        pa.field("tier", pa.int32()),
        pa.field("bucket", pa.string()),  # the target bucket, "<height>x<width>"
        pa.field("shard", pa.string()),  # '<tier>/<HxW>/<source>--fold/<basename>'
        pa.field("index_in_shard", pa.int64()),
        pa.field("folded_from", pa.string()),  # "<tier>/<HxW>" of the original placement
        pa.field("image_key", pa.string()),  # of the original placement the copy was made from
        pa.field("meta_key", pa.string()),
        pa.field("index_sha256", pa.string()),  # the fold folder's index.json at commit
        pa.field("folded_at", pa.timestamp("us", tz="UTC")),
        pa.field("fold_run_id", pa.string()),
    ]
)


def fold_folder(source: str) -> str:
    """The partition that holds ``source``'s folded copies in a target bucket."""
    name = f"{source}{FOLD_SUFFIX}"
    if not SOURCE_RE.fullmatch(name):
        raise ValueError(f"source {source!r} is too long for a fold folder ({name!r}); shorten the source name")
    return name


@dataclass(frozen=True)
class FoldPolicy:
    enabled: bool = False
    max_steps: int = 2
    min_stream_samples: int = 1

    @classmethod
    def from_settings(cls, settings) -> FoldPolicy:
        return cls(settings.fold_sparse_buckets, settings.fold_max_steps, settings.min_stream_samples)


@dataclass
class FoldPlan:
    folds: dict[str, str]  # sparse "tier/HxW" -> target "tier/HxW"
    refused: dict[str, int]  # sparse "tier/HxW" with no target in reach -> unskipped samples
    rows: pa.Table  # sample_id, source, folded_from, tier, height, width (the target shape)


@dataclass
class FoldReport:
    folds: dict[str, str] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    folded: int = 0  # copies in the tree after the run
    per_target: dict[str, int] = field(default_factory=dict)
    encoded: int = 0  # images decoded, cropped and encoded this run (the image work)
    reused: int = 0  # copies rewritten with their old bytes (their target bucket changed)
    kept: int = 0  # copies left where they were
    dropped: dict[str, int] = field(default_factory=dict)  # could not be made, by reason
    buckets_written: list[str] = field(default_factory=list)  # "tier/HxW/<source>--fold"
    buckets_removed: list[str] = field(default_factory=list)


_PLAN_SCHEMA = pa.schema(
    [
        ("sample_id", pa.string()),
        ("source", pa.string()),
        ("folded_from", pa.string()),
        ("tier", pa.int32()),
        ("height", pa.int32()),
        ("width", pa.int32()),
    ]
)


def unskipped_placements(exports: pa.Table, skips: pa.Table) -> pa.Table:
    """Current placements that no skip row names (what publication counts as unskipped)."""
    placed = exports.select(["sample_id", "source", "tier", "bucket", "shard", "index_in_shard"]).filter(pc.is_valid(exports["shard"]))
    if not skips.num_rows:
        return placed
    keys = (
        skips.select(["shard", "index_in_shard"])
        .cast(pa.schema([("shard", pa.string()), ("index_in_shard", pa.int64())]))
        .group_by(["shard", "index_in_shard"], use_threads=False)
        .aggregate([])
    )
    return placed.join(keys, ["shard", "index_in_shard"], join_type="left anti")


def _pooled_targets(
    tier: int, indexes: dict[int, str], counts: Counter, published: list[int], bucket_cfg: BucketConfig, policy: FoldPolicy
) -> dict[int, int]:
    """Sparse aspect index -> the sparse bucket it is pooled into.

    A small corpus may have no bucket of a tier published on its own (at the default 32, none of
    the demo corpus has). Sparse buckets with no published bucket in reach are then pooled: the
    largest such bucket takes the images of those in reach of it, when together they reach
    ``min_stream_samples``; it is published with its folded copies, and is never folded itself
    (so folds still never chain). Greedy, largest first; ties to the squarer shape.
    """
    alone = [
        i
        for i, rel in indexes.items()
        if counts[rel] < policy.min_stream_samples and fold_target(tier, i, published, bucket_cfg, policy.max_steps) is None
    ]
    squarest = len(shapes_for_tier(tier, bucket_cfg)) // 2
    assigned: dict[int, int] = {}
    free = set(alone)
    for i in sorted(alone, key=lambda i: (-counts[indexes[i]], abs(i - squarest), i)):
        if i not in free:
            continue
        group = [k for k in sorted(free - {i}) if fold_target(tier, k, [i], bucket_cfg, policy.max_steps) == i]
        if counts[indexes[i]] + sum(counts[indexes[k]] for k in group) < policy.min_stream_samples:
            continue
        free -= {i, *group}
        assigned.update({k: i for k in group})
    return assigned


def _placements_by_bucket(exports: pa.Table | RowsByKey) -> RowsByKey:
    if not isinstance(exports, pa.Table):
        return exports
    placed = exports.filter(pc.is_valid(exports["shard"]))
    return TableByKey(placed, bucket_rels(placed))


def _skips_by_bucket(skips: pa.Table | RowsByKey) -> RowsByKey:
    if not isinstance(skips, pa.Table):
        return skips
    return TableByKey(skips, shard_buckets(skips["shard"]))


def plan_folds(exports: pa.Table | RowsByKey, skips: pa.Table | RowsByKey, bucket_cfg: BucketConfig, policy: FoldPolicy) -> FoldPlan:
    """Which sparse buckets fold into which published bucket, and the samples that move.

    ``exports`` (placements) and ``skips`` are tables or rows spilled by bucket: either way one
    bucket's placements and skip rows are read at a time, and only the live placements of
    sparse buckets (fewer than ``min_stream_samples`` each) are kept."""
    empty = FoldPlan({}, {}, _PLAN_SCHEMA.empty_table())
    if not policy.enabled or policy.min_stream_samples <= 1:
        return empty
    placed, skipped = _placements_by_bucket(exports), _skips_by_bucket(skips)
    counts: Counter = Counter()
    sparse: dict[str, pa.Table] = {}  # rel -> its live placements
    for rel in sorted(placed.bucket_names()):
        live = unskipped_placements(placed.bucket(rel), skipped.bucket(rel))
        if not live.num_rows:
            continue  # nothing left to publish or fold
        counts[rel] = live.num_rows
        if live.num_rows < policy.min_stream_samples:
            sparse[rel] = live
    by_tier: dict[int, dict[int, str]] = defaultdict(dict)  # tier -> aspect index -> rel
    for rel in counts:
        tier_name, bucket = rel.split("/")
        height, width = parse_bucket(bucket)
        index = shape_index(int(tier_name), height, width, bucket_cfg)
        if index is not None:  # a shape of another bucket config is never folded or a target
            by_tier[int(tier_name)][index] = rel
    folds, refused = {}, {}
    targets: dict[str, tuple[int, int, int]] = {}
    for tier, indexes in by_tier.items():
        # In aspect order: fold_target keeps the first of two equally near, equally square shapes.
        published = sorted(i for i, rel in indexes.items() if counts[rel] >= policy.min_stream_samples)
        pooled = _pooled_targets(tier, indexes, counts, published, bucket_cfg, policy)
        for i, rel in indexes.items():
            if counts[rel] >= policy.min_stream_samples or i in set(pooled.values()):
                continue
            j = pooled.get(i)
            if j is None:
                j = fold_target(tier, i, published, bucket_cfg, policy.max_steps)
            if j is None:
                refused[rel] = counts[rel]
                continue
            folds[rel] = indexes[j]
            height, width = parse_bucket(indexes[j].split("/")[1])
            targets[rel] = (tier, height, width)
    if not folds:
        return FoldPlan({}, refused, _PLAN_SCHEMA.empty_table())
    moving = [
        pa.table(
            {
                "sample_id": sparse[rel]["sample_id"].cast(pa.string()),
                "source": sparse[rel]["source"].cast(pa.string()),
                "folded_from": pa.array([rel] * sparse[rel].num_rows, pa.string()),
                "tier": pa.array([targets[rel][0]] * sparse[rel].num_rows, pa.int32()),
                "height": pa.array([targets[rel][1]] * sparse[rel].num_rows, pa.int32()),
                "width": pa.array([targets[rel][2]] * sparse[rel].num_rows, pa.int32()),
            },
            schema=_PLAN_SCHEMA,
        )
        for rel in counts
        if rel in folds
    ]
    return FoldPlan(dict(sorted(folds.items())), dict(sorted(refused.items())), pa.concat_tables(moving))


# Applying a plan, source by source ------------------------------------------------------------
def fold_folders_in_tree(mds_root: str, options: dict | None = None) -> dict[str, dict[BucketRef, bytes]]:
    """Every fold folder of the tree: source -> bucket -> its index.json bytes."""
    root = locate(mds_root, options)
    found: dict[str, dict[BucketRef, bytes]] = defaultdict(dict)
    for ref in list_buckets(mds_root, options):
        for name in list_sources(root.child(ref.rel).uri, options):
            if name.endswith(FOLD_SUFFIX):
                raw = try_read_bytes(root.child(ref.rel, name, INDEX_BASENAME))
                if raw is not None:
                    found[name.removesuffix(FOLD_SUFFIX)][ref] = raw
    return dict(found)


def fold_source(
    paths: StoragePaths,
    source: str,
    wanted: pa.Table,
    current: dict[BucketRef, bytes],
    *,
    bucket_cfg: BucketConfig,
    writer_cfg: MdsWriterConfig,
    options: dict | None,
    run_id: str | None,
    scratch_dir: str | None,
    report: FoldReport,
) -> pa.Table:
    """Bring ``source``'s fold partition to ``wanted`` (plan rows of this source); returns its
    folds table (``FOLDS_SCHEMA``) as committed."""
    uri = paths.folds_table(source)
    if not wanted.num_rows and not current and open_table(uri, options) is None:
        return FOLDS_SCHEMA.empty_table()  # never folded: no lock, no table, nothing to do
    with table_lock(uri, options, purpose=f"fold of {source}") as check:
        stored = open_table(uri, options)
        recorded = stored.to_table().cast(FOLDS_SCHEMA) if stored is not None else FOLDS_SCHEMA.empty_table()
        digests = {ref.rel: sha256_bytes(raw) for ref, raw in current.items()}
        trusted_rows = [r for r in recorded.to_pylist() if digests.get(f"{r['tier']}/{r['bucket']}") == r["index_sha256"]]
        have: dict[str, dict[str, dict]] = defaultdict(dict)  # target rel -> sample_id -> row
        for r in trusted_rows:
            have[f"{r['tier']}/{r['bucket']}"][r["sample_id"]] = r
        trusted_buckets = set(have)

        exports_ds = open_table(paths.exports_table(source), options)
        keys = {}
        if wanted.num_rows and exports_ds is not None:
            # Filtered in the scan: the source's other placements are never materialised.
            ids = sorted(set(wanted["sample_id"].to_pylist()))
            ex = exports_ds.to_table(columns=["sample_id", "image_key", "meta_key"], filter=one_of("sample_id", ids))
            keys = {r["sample_id"]: (r["image_key"], r["meta_key"]) for r in ex.to_pylist()}
        want: dict[str, dict[str, dict]] = defaultdict(dict)
        for r in wanted.to_pylist():
            image_key, meta_key = keys.get(r["sample_id"], (None, None))
            if image_key is None:
                continue  # no current placement to copy (changed since the plan): next run
            want[f"{r['tier']}/{r['height']}x{r['width']}"][r["sample_id"]] = {**r, "image_key": image_key, "meta_key": meta_key}

        def same(rel: str) -> bool:
            if rel in current and rel not in trusted_buckets:
                return False
            a, b = want.get(rel, {}), have.get(rel, {})
            return a.keys() == b.keys() and all(
                (a[s]["image_key"], a[s]["meta_key"], a[s]["folded_from"]) == (b[s]["image_key"], b[s]["meta_key"], b[s]["folded_from"])
                for s in a
            )

        all_rels = set(want) | {ref.rel for ref in current}
        changed = {rel for rel in all_rels if not same(rel)}
        kept_rows = [r for rel, rows in have.items() if rel not in changed for r in rows.values()]
        report.kept += len(kept_rows)
        if not changed:
            table = pa.Table.from_pylist(kept_rows, schema=FOLDS_SCHEMA)
            if stored is not None and len(trusted_rows) != recorded.num_rows:
                _write_table(table, uri, options)
            return table
        check()
        table = _rewrite(
            paths,
            source,
            want,
            have,
            current,
            changed,
            kept_rows,
            bucket_cfg=bucket_cfg,
            writer_cfg=writer_cfg,
            options=options,
            run_id=run_id,
            scratch_dir=scratch_dir,
            report=report,
        )
        _write_table(table, uri, options)
        return table


def _write_table(table: pa.Table, uri: str, options: dict | None) -> None:
    lance.write_dataset(table, uri, mode="overwrite", storage_options=options)


def _rewrite(
    paths, source, want, have, current, changed, kept_rows, *, bucket_cfg, writer_cfg, options, run_id, scratch_dir, report
) -> pa.Table:
    """Write the changed target buckets of the fold partition in one commit."""
    fold = fold_folder(source)
    mds_root = paths.mds_root
    todo = {rel: want.get(rel, {}) for rel in changed}
    needed = [sid for rows in todo.values() for sid in rows]
    raw_ds = open_table(paths.raw_table(source), options)
    raw = {}
    if needed and raw_ds is not None:
        cols = [c for c in ("sample_id", "width", "height", "caption", "label", "caption_model") if c in raw_ds.schema.names]
        # Only the rows to write: the source's captions are never read whole.
        wanted_ok = all_of(STATUS_OK, one_of("sample_id", sorted(set(needed))))
        found = raw_ds.to_table(columns=cols, filter=wanted_ok, with_row_address=True)
        raw = {r["sample_id"]: r for r in found.to_pylist()}
    indexes = {ref: _json(data) for ref, data in current.items()}
    reuse: dict[tuple[str, int], tuple[str, dict]] = {}  # old placement -> (target rel, wanted row)
    encode: list[tuple[str, dict]] = []
    for rel, rows in sorted(todo.items()):
        for sid, row in sorted(rows.items()):
            if sid not in raw:
                report.dropped["missing_row"] = report.dropped.get("missing_row", 0) + 1
                continue
            old = have.get(rel, {}).get(sid)
            if old is not None and old["image_key"] == row["image_key"]:
                reuse[(old["shard"], int(old["index_in_shard"]))] = (rel, row)
            else:
                encode.append((rel, row))

    def meta(row: dict) -> dict:
        r = raw[row["sample_id"]]
        return {
            "sample_id": row["sample_id"],
            "caption": r.get("caption"),
            "label": r.get("label"),
            "caption_model": r.get("caption_model"),
        }

    def samples(scratch: str) -> Iterator[dict]:
        if reuse:
            reader = ShardReader(mds_root, indexes, fold, scratch, options)
            for shard, index, old in reader.read(reuse):
                rel, row = reuse[(shard, index)]
                report.reused += 1
                yield {
                    "image": old["image"],
                    "tier": row["tier"],
                    "height": row["height"],
                    "width": row["width"],
                    "original_width": old["original_width"],
                    "original_height": old["original_height"],
                    **meta(row),
                }
        for start in range(0, len(encode), 32):
            # Rows are encoded only when found in ``raw``, which is read from the raw table.
            assert raw_ds is not None, "rows to encode without a raw table"
            chunk = encode[start : start + 32]
            images = read_images(raw_ds, [raw[row["sample_id"]]["_rowaddr"] for _, row in chunk])
            for (_rel, row), data in zip(chunk, images):
                shape = Assignment(row["tier"], row["height"], row["width"])
                result = transform.prepare(data, bucket_cfg, shape=shape) if data is not None else Drop("invalid_image")
                if isinstance(result, Drop):
                    report.dropped[result.reason] = report.dropped.get(result.reason, 0) + 1
                    continue
                report.encoded += 1
                yield {
                    "image": result.jpeg,
                    "tier": result.tier,
                    "height": result.height,
                    "width": result.width,
                    "original_width": result.original_width,
                    "original_height": result.original_height,
                    **meta(row),
                }

    rewrite = {BucketRef(int(rel.split("/")[0]), *parse_bucket(rel.split("/")[1])) for rel in changed}
    with tempfile.TemporaryDirectory(prefix=f"prx-fold-{source}-", dir=scratch_dir) as scratch:
        export = write_partition(
            samples(scratch),
            mds_root=mds_root,
            source=fold,
            storage_options=options,
            config=writer_cfg,
            allow_empty=True,
            scratch_dir=scratch_dir,
            rewrite=rewrite,
        )
    report.buckets_written += [f"{ref.rel}/{fold}" for ref in sorted(rewrite) if ref.rel in export.samples_per_bucket]
    report.buckets_removed += [f"{ref.rel}/{fold}" for ref in export.removed_buckets]

    root = locate(mds_root, options)
    digest = {}
    for ref in rewrite:
        data = try_read_bytes(root.child(ref.rel, fold, INDEX_BASENAME))
        if data is not None:
            digest[ref.rel] = sha256_bytes(data)
    now = datetime.now(UTC)
    rows = list(kept_rows)
    for r in export.lineage.to_pylist():
        rel = f"{r['tier']}/{r['bucket']}"
        w = want[rel][r["sample_id"]]
        rows.append(
            {
                "sample_id": r["sample_id"],
                "source": source,
                "tier": r["tier"],
                "bucket": r["bucket"],
                "shard": r["shard"],
                "index_in_shard": r["index_in_shard"],
                "folded_from": w["folded_from"],
                "image_key": w["image_key"],
                "meta_key": w["meta_key"],
                "index_sha256": digest.get(rel),
                "folded_at": now,
                "fold_run_id": run_id,
            }
        )
    return pa.Table.from_pylist(rows, schema=FOLDS_SCHEMA).sort_by("sample_id")


def _json(data: bytes) -> dict:
    import json

    return json.loads(data)


def folded_skip_rows(exports: pa.Table | RowsByKey, folds: pa.Table, schema: pa.Schema) -> pa.Table:
    """A ``folded`` skip for the original placement of every sample that has a folded copy
    (``exports``: placements, a table or spilled by bucket, read a bucket at a time)."""
    if not folds.num_rows:
        return schema.empty_table()
    placed = _placements_by_bucket(exports)
    folded_ids = pa.array(sorted(set(folds["sample_id"].to_pylist())), pa.string())
    originals = [
        rows.filter(pc.is_in(rows["sample_id"], value_set=folded_ids)) for rows in (placed.bucket(rel) for rel in placed.bucket_names())
    ]
    found = [rows for rows in originals if rows.num_rows]
    if not found:
        return schema.empty_table()
    originals_table = pa.concat_tables(found)
    n = originals_table.num_rows
    table = pa.table(
        {
            "sample_id": originals_table["sample_id"],
            "source": originals_table["source"],
            "shard": originals_table["shard"],
            "index_in_shard": originals_table["index_in_shard"].cast(pa.int64()),
            "reason": pa.array([FOLDED] * n, pa.string()),
            "kept_sample_id": pa.nulls(n, pa.string()),
        }
    )
    return table.select(schema.names).cast(schema)


def apply_fold_policy(
    paths: StoragePaths,
    exports: pa.Table,
    skips: pa.Table,
    *,
    sources: Iterable[str],
    bucket_cfg: BucketConfig,
    writer_cfg: MdsWriterConfig | None = None,
    policy: FoldPolicy | None = None,
    options: dict | None = None,
    run_id: str | None = None,
    scratch_dir: str | None = None,
) -> tuple[pa.Table, FoldReport]:
    """``fold_sparse_buckets`` on tables: returns ``skips`` plus the ``folded`` rows."""
    folded, report = fold_sparse_buckets(
        paths,
        exports,
        skips,
        sources=sources,
        bucket_cfg=bucket_cfg,
        writer_cfg=writer_cfg,
        policy=policy,
        options=options,
        run_id=run_id,
        scratch_dir=scratch_dir,
    )
    return pa.concat_tables([skips, folded.cast(skips.schema)]), report


def fold_sparse_buckets(
    paths: StoragePaths,
    exports: pa.Table | RowsByKey,
    skips: pa.Table | RowsByKey,
    *,
    sources: Iterable[str],
    bucket_cfg: BucketConfig,
    writer_cfg: MdsWriterConfig | None = None,
    policy: FoldPolicy | None = None,
    options: dict | None = None,
    run_id: str | None = None,
    scratch_dir: str | None = None,
) -> tuple[pa.Table, FoldReport]:
    """Fold the sparse buckets that ``exports`` (placements) and ``skips`` (every source, before
    folding) show, bring every source's fold partition up to date, and return the ``folded``
    skip rows of the originals (SKIP_SCHEMA). Both inputs may be spilled by bucket: memory is a
    bucket's rows plus the samples that fold. With the policy off, existing fold partitions are
    removed. ``policy`` defaults to off; ``writer_cfg`` must give the columns the export used."""
    policy = policy or FoldPolicy()
    writer_cfg = writer_cfg or MdsWriterConfig()
    sources = sorted(set(sources))
    reserved = [name for name in sources if name.endswith(FOLD_SUFFIX)]
    if reserved and policy.enabled:
        raise ValueError(f"source names ending in {FOLD_SUFFIX!r} are reserved for folded copies: rename {reserved}")
    plan = plan_folds(exports, skips, bucket_cfg, policy)
    report = FoldReport(folds=plan.folds, refused=plan.refused)
    # A registered source whose name looks like a fold folder is a source, never a fold.
    in_tree = {
        source: found for source, found in fold_folders_in_tree(paths.mds_root, options).items() if f"{source}{FOLD_SUFFIX}" not in reserved
    }
    visit = sorted(set(sources) | set(in_tree) | set(plan.rows["source"].to_pylist()))
    tables = []
    for source in visit:
        wanted = plan.rows.filter(pc.equal(plan.rows["source"], source))
        table = fold_source(
            paths,
            source,
            wanted,
            in_tree.get(source, {}),
            bucket_cfg=bucket_cfg,
            writer_cfg=writer_cfg,
            options=options,
            run_id=run_id,
            scratch_dir=scratch_dir,
            report=report,
        )
        tables.append(table)
    folds = pa.concat_tables(tables) if tables else FOLDS_SCHEMA.empty_table()
    report.folded = folds.num_rows
    report.per_target = dict(sorted(Counter(f"{t}/{b}" for t, b in zip(folds["tier"].to_pylist(), folds["bucket"].to_pylist())).items()))
    return folded_skip_rows(exports, folds, SKIP_SCHEMA), report


def read_folds(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> pa.Table:
    """Every source's folds table (what the data card and lineage show)."""
    tables = []
    for source in sorted(set(sources)):
        ds = open_table(paths.folds_table(source), options)
        if ds is not None:
            tables.append(ds.to_table().cast(FOLDS_SCHEMA))
    return pa.concat_tables(tables) if tables else FOLDS_SCHEMA.empty_table()


def fold_summary(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> list[tuple[str, str, int]]:
    """(folded from, into, samples) over every source, sorted."""
    folds = read_folds(paths, sources, options)
    pairs = Counter(
        (src, f"{t}/{b}") for src, t, b in zip(folds["folded_from"].to_pylist(), folds["tier"].to_pylist(), folds["bucket"].to_pylist())
    )
    return [(src, dst, n) for (src, dst), n in sorted(pairs.items())]


__all__ = [
    "FOLDED",
    "FOLDS_SCHEMA",
    "FoldPlan",
    "FoldPolicy",
    "FoldReport",
    "apply_fold_policy",
    "fold_sparse_buckets",
    "fold_folder",
    "fold_summary",
    "folded_skip_rows",
    "plan_folds",
    "read_folds",
]
