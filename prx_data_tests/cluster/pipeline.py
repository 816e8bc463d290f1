"""The per-source chain and the corpus steps as plain calls, on a cluster or in one process,
and what two runs must agree on (rows, exported bytes per sample id, skip lists)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass

import lance
import pyarrow as pa

from prx_data.core.paths import StoragePaths
from prx_data.core.ray_tasks import Executor
from prx_data.core.storage import glob_files, locate, read_bytes

# The source's table columns that must match: everything the stages derive from the bytes and
# the spec (timestamps and run ids differ between any two runs).
ROW_COLUMNS = (
    "sample_id",
    "source_key",
    "status",
    "error",
    "image_sha256",
    "width",
    "height",
    "source_caption",
    "caption",
    "phash",
    "label",
    "license",
    "source_url",
)


@dataclass
class Outcome:
    rows: list[dict]  # the source table, ROW_COLUMNS, by sample_id
    exported: dict[str, str]  # sample_id -> sha256 of the exported JPEG bytes
    placements: dict[str, str]  # sample_id -> "tier/bucket"
    skips: set[tuple[str, str]]  # (sample_id, reason)
    merged: dict[str, int]  # bucket -> samples in its merged index


def run_chain(
    source,
    paths: StoragePaths,
    options: dict | None,
    *,
    optout_dir: str,
    executor: Executor,
    workers: int,
    write_workers: int,
) -> None:
    from prx_data.curation.optout.requests import ingest_matcher
    from prx_data.ingest.driver import ingest_source
    from prx_data.stages.caption_stage import compute_captions
    from prx_data.stages.export_stage import export_source
    from prx_data.stages.label_stage import compute_labels
    from prx_data.stages.phash_stage import compute_phashes

    name = source.spec.name
    uri = paths.raw_table(name)
    ingest_source(source, uri, storage_options=options, optout=ingest_matcher(optout_dir), workers=workers)
    compute_phashes(uri, executor=executor, storage_options=options)
    compute_captions(uri, {"backend": "source"}, executor=executor, storage_options=options)
    compute_labels(uri, {"backend": "minilm"}, executor=executor, storage_options=options)
    export_source(
        uri,
        name,
        mds_root=paths.mds_root,
        exports_uri=paths.exports_table(name),
        executor=executor,
        storage_options=options,
        write_workers=write_workers,
    )
    _corpus_steps(name, paths, options)


def run_source_job(source, spec_dir: str, paths: StoragePaths, env: dict[str, str], *, optout_dir: str, write_workers: int) -> None:
    """The per-source chain through Dagster's own job (``source_pipeline``) as a deployment runs
    it: settings from ``env`` (PRX_* and the S3 variables; the caller sets them in os.environ),
    resources built by ``defs/``, then the corpus steps as plain calls (they submit no Ray task).
    ``spec_dir`` gets the source's YAML, as PRX_SOURCES_DIR."""
    import dagster as dg
    import yaml

    from prx_data.core.settings import get_settings
    from prx_data.defs.build import build_defs
    from prx_data.defs.partitions import SOURCES_PARTITION

    name = source.spec.name
    with open(os.path.join(spec_dir, f"{name}.yaml"), "w") as handle:
        yaml.safe_dump(source.spec.model_dump(mode="json", exclude_defaults=True), handle)
    get_settings.cache_clear()
    try:
        settings = get_settings()
        assert settings.lance_root == paths.lance_root and settings.optout_dir == optout_dir, "the caller set the environment"
        job = build_defs().resolve_job_def("source_pipeline")
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(SOURCES_PARTITION, [name])
            result = job.execute_in_process(
                instance=instance,
                partition_key=name,
                raise_on_error=False,
                run_config={"ops": {"mds_shards": {"config": {"write_workers": write_workers}}}},
            )
            failures = [e.message for e in result.all_events if e.is_failure]
            assert result.success, failures
    finally:
        get_settings.cache_clear()
    _corpus_steps(name, paths, settings.storage_options or None)


def _corpus_steps(name: str, paths: StoragePaths, options: dict | None) -> None:
    from prx_data.curation.exclusion import compute_skips, write_skip_lists
    from prx_data.export.corpus_index import merge_all
    from prx_data.imaging.buckets import BucketConfig

    merge_all(paths.mds_root, options, gc_min_age_s=0)
    _, skips = compute_skips(paths, {name: 0}, bucket_cfg=BucketConfig(), options=options)
    write_skip_lists(paths.mds_root, skips, options, paths=paths)


def outcome(source: str, paths: StoragePaths, options: dict | None) -> Outcome:
    # lazy: streaming's reader pulls in its package (torch)
    from streaming.base.format import reader_from_json

    from prx_data.curation.exclusion import compute_skips
    from prx_data.imaging.buckets import BucketConfig

    table = lance.dataset(paths.raw_table(source), storage_options=options).to_table()
    columns = [c for c in ROW_COLUMNS if c in table.column_names]
    rows = sorted(table.select(columns).to_pylist(), key=lambda r: r["sample_id"])
    exports = lance.dataset(paths.exports_table(source), storage_options=options).to_table()
    placed = [r for r in exports.to_pylist() if r["shard"]]
    root = locate(paths.mds_root, options)
    exported, placements = {}, {}
    with tempfile.TemporaryDirectory(prefix="prx-outcome-") as local:
        for rel in glob_files(root, "*", recursive=True):
            target = os.path.join(local, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(read_bytes(root.child(rel)))
        for r in placed:
            folder = os.path.join(local, os.path.dirname(r["shard"]))
            with open(os.path.join(folder, "index.json")) as handle:
                info = next(s for s in json.load(handle)["shards"] if s["raw_data"]["basename"] == os.path.basename(r["shard"]))
            sample = reader_from_json(folder, None, info)[r["index_in_shard"]]
            assert sample["sample_id"] == r["sample_id"], r
            exported[r["sample_id"]] = hashlib.sha256(sample["image"]).hexdigest()
            placements[r["sample_id"]] = f"{r['tier']}/{r['bucket']}"
        merged = {}
        for rel in glob_files(root, "index.json", recursive=True):
            if rel.count("/") == 2:  # <tier>/<HxW>/index.json: a bucket's merged index
                with open(os.path.join(local, rel)) as handle:
                    merged[rel.rsplit("/", 1)[0]] = sum(s["samples"] for s in json.load(handle)["shards"])
    _, skips = compute_skips(paths, {source: 0}, bucket_cfg=BucketConfig(), options=options)
    pairs = (
        {(r["sample_id"], r["reason"]) for r in skips.select(["sample_id", "reason"]).to_pylist()} if isinstance(skips, pa.Table) else set()
    )
    return Outcome(rows=rows, exported=exported, placements=placements, skips=pairs, merged=merged)
