"""Declarative automation: a new or changed source flows to the training export by itself.

Who starts what:
- ``source_registry_sensor`` adds a partition for a new spec (nothing else) and requests
  ``raw_samples`` when a known source's spec changed.
- ``PER_SOURCE`` on every per-source asset: a new partition (missing), an upstream update or a
  code-version change requests that partition's chain; the whole chain of one partition lands in
  one run because every step is requested on the same tick.
- ``CORPUS_SETTLED`` on the corpus-wide assets: they run once after the per-source work of a
  batch has settled, not once per partition.
- ``optout_folder`` is observed by ``optout_folder_sensor``: a changed opt-out folder is a new
  data version, which requests ``optout_requests`` and what depends on it, nothing per source.

Code versions name what decides each asset's output, so the UI marks partitions stale when it
changes and ``code_version_changed`` re-requests them; the per-row stages then redo stale rows
only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import dagster as dg

from prx_data.defs.partitions import per_source_selection
from prx_data.defs.resources import SourceRegistryResource

# --- conditions ---------------------------------------------------------------------------------

# eager() plus code_version_changed in the trigger: a new captioner or prompt version must reach
# the partitions that were already current, not only new ones.
PER_SOURCE = (
    (
        dg.AutomationCondition.newly_missing()
        | dg.AutomationCondition.any_deps_updated()
        | dg.AutomationCondition.code_version_changed()
    ).since_last_handled()
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("per_source")

# How far up the graph the corpus assets look for per-source work in flight: corpus_report ->
# skip_lists -> corpus_index -> mds_shards -> caption_labels -> captions -> raw_samples.
_UPSTREAM_DEPTH = 6


def _anywhere_upstream(condition: dg.AutomationCondition) -> dg.AutomationCondition:
    """True when any asset upstream, at any depth, matches ``condition``.

    Direct deps are not enough: skip_lists depends on caption_labels (which a chain run has
    already materialized) and on corpus_index, and would start while that run still exports the
    source's shards to mds_shards, upstream of corpus_index only; then run again after it.
    """
    reach = condition
    for _ in range(_UPSTREAM_DEPTH - 1):
        reach = condition | dg.AutomationCondition.any_deps_match(reach)
    return dg.AutomationCondition.any_deps_match(reach)


# Per-source work not finished: a run planned to materialize an asset partition upstream and has
# not yet (queued or running, exports included).
_upstream_in_progress = _anywhere_upstream(dg.AutomationCondition.in_progress()).with_label("upstream_in_progress")

# A per-source parent that is about to start is as good as running: without this, the corpus
# assets would be requested on the very tick that requests the chain of a new source (any
# dep "will be requested" counts as updated) and run before the chain, then again after it.
# Direct deps suffice here: a corpus asset whose per-source parents wait holds back the corpus
# assets below it, which only react to it.
_per_source_parent_starting = dg.AutomationCondition.any_deps_match(
    dg.AutomationCondition.will_be_requested()
).allow(per_source_selection)

# No ~any_deps_missing here, unlike eager(): the corpus depends on every partition, and one
# source that never exported (a broken spec) must not hold the whole corpus back.
CORPUS_SETTLED = (
    dg.AutomationCondition.any_deps_updated().since_last_handled()
    & ~_upstream_in_progress
    & ~_per_source_parent_starting.with_label("per_source_parent_starting")
    & ~dg.AutomationCondition.in_progress()
).with_label("corpus_settled")


automation_sensor = dg.AutomationConditionSensorDefinition(
    "prx_automation",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    # One run per source partition holding its whole chain, listed per source in the runs
    # view, rather than a backfill whenever a tick requests more than one partition.
    emit_backfills=False,
    description="Runs each source's chain when it is new, its upstream changed or its code "
    "version changed, and the corpus-wide assets once the per-source work has settled.",
)


def show_automation_on(instance: dg.DagsterInstance) -> None:
    """Clear the pre-sensor auto-materialize pause flag, which nothing here uses (automation runs
    as ``prx_automation``, an automation condition sensor) but which the UI's job pages read:
    left unset, they say "Auto-materialize off" while automation runs."""
    from dagster._daemon.asset_daemon import set_auto_materialize_paused

    set_auto_materialize_paused(instance, False)


# --- retries ------------------------------------------------------------------------------------

# For raw_samples, phashes and mds_shards: Ray workers lost, object-store hiccups and Lance
# commit conflicts (a compaction or another writer committed first) pass on a retry; the column
# stages keep staged batches, so a retry redoes only what was not staged. Short delays: long
# outages are left to run retries (dagster.yaml run_retries), which hold no run slot while they
# wait. Not on captions / caption_labels: their backends retry each request themselves, and a
# backend that stays down must fail with its own message (the step's error), which a step retry
# would replace with "Exceeded max_retries"; the run retry still re-runs them, from staging.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

# Marks the ops that commit to the run's source table (raw_samples, phashes, captions,
# caption_labels): a second concurrent commit fails with a commit conflict. The in-process
# executor (executor.py) runs a run's steps one at a time; the tag names the constraint for any
# executor that would not.
SOURCE_TABLE_WRITER_TAG = {"prx/lance_writer": "source_table"}


# --- code versions ------------------------------------------------------------------------------


def captions_code_version() -> str:
    """caption_model@caption_prompt_version of the configured captioner (what the stage writes
    into each row and compares to find stale rows)."""
    from prx_data.captioning.factory import parse_captioner_config
    from prx_data.settings import get_settings
    from prx_data.stages.caption_stage import caption_identity

    model, prompt_version = caption_identity(parse_captioner_config(get_settings().captioner))
    return f"{model}@{prompt_version}"


def labels_code_version() -> str:
    from prx_data.labeling.factory import parse_classifier_config
    from prx_data.settings import get_settings
    from prx_data.stages.label_stage import label_identity

    model, version = label_identity(parse_classifier_config(get_settings().classifier))
    return f"{model}@{version}"


# --- the GPU pool ---------------------------------------------------------------------------------

GPU_POOL = "gpu"


def _uses_local_gpu(config) -> bool:
    # vLLM always runs on GPU workers; transformers / MiniLM only with a CUDA device. A remote
    # OpenAI-compatible server and source captions use no GPU of this deployment.
    if config.backend == "vllm":
        return True
    return str(getattr(config, "device", "cpu")).startswith("cuda")


def captions_pool() -> str | None:
    """``gpu`` when the configured captioner runs on a GPU here, else no pool: CPU backends must
    not queue sources behind each other for a GPU they never use."""
    from prx_data.captioning.factory import parse_captioner_config
    from prx_data.settings import get_settings

    return GPU_POOL if _uses_local_gpu(parse_captioner_config(get_settings().captioner)) else None


def labels_pool() -> str | None:
    from prx_data.labeling.factory import parse_classifier_config
    from prx_data.settings import get_settings

    return GPU_POOL if _uses_local_gpu(parse_classifier_config(get_settings().classifier)) else None


def export_code_version() -> str:
    from prx_data.defs.export.resources import ExportResource
    from prx_data.stages.export_stage import export_version

    return export_version(ExportResource().bucket_config())


# --- the opt-out folder as an observable source -------------------------------------------------


def _counted(path: Path) -> bool:
    # Editor swap files, ".DS_Store" and write_request's "*.tmp" are not requests; counting them
    # would rebuild the skip lists for nothing.
    return not path.name.startswith(".") and not path.name.endswith((".tmp", "~"))


def optout_folder_version(folder: str | Path) -> tuple[str, int]:
    """(data version, file count) of the opt-out folder: a hash over every file's relative path
    and content, so touching a file changes nothing and editing one request changes it."""
    root = Path(folder)
    digest = hashlib.sha256()
    count = 0
    if root.is_dir():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if not _counted(path) or not path.is_file():
                    continue
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(hashlib.sha256(path.read_bytes()).digest())
                count += 1
    return digest.hexdigest()[:16], count


OPTOUT_FOLDER = dg.AssetKey("optout_folder")


@dg.observable_source_asset(
    key=OPTOUT_FOLDER,
    group_name="curation",
    required_resource_keys={"registry"},
    description="The opt-out folder (PRX_OPTOUT_DIR). Its data version is a hash of the files in "
    "it; a new version requests optout_requests and what depends on it.",
)
def optout_folder(context) -> dg.ObserveResult:
    folder = context.resources.registry.optout_dir
    version, count = optout_folder_version(folder)
    return dg.ObserveResult(data_version=dg.DataVersion(version), metadata={"files": count, "folder": dg.MetadataValue.path(folder)})


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Records an observation of optout_folder when the folder's content changed "
    "(no run is launched for the observation itself).",
)
def optout_folder_sensor(context: dg.SensorEvaluationContext, registry: SourceRegistryResource):
    version, count = optout_folder_version(registry.optout_dir)
    # A first tick (no cursor) compares with the version last recorded in the instance (by an
    # earlier sensor or by `prx-data run`), so opening the UI on built data records nothing new.
    baseline = context.cursor or observed_optout_version(context.instance)
    if baseline == version:
        skip = dg.SkipReason(f"opt-out folder unchanged ({count} file(s))")
        return skip if context.cursor == version else dg.SensorResult(skip_reason=skip, cursor=version)
    return dg.SensorResult(asset_events=[optout_observation(version, count, registry.optout_dir)], cursor=version)


def optout_observation(version: str, count: int, folder: str) -> dg.AssetObservation:
    return dg.AssetObservation(
        asset_key=OPTOUT_FOLDER,
        # The tag observe functions write: automation compares these data versions.
        tags={"dagster/data_version": version},
        metadata={"files": count, "folder": dg.MetadataValue.path(folder)},
    )


def observed_optout_version(instance: dg.DagsterInstance) -> str | None:
    records = instance.fetch_observations(OPTOUT_FOLDER, limit=1).records
    if not records or records[0].asset_observation is None:
        return None
    return records[0].asset_observation.tags.get("dagster/data_version") or (
        records[0].asset_observation.data_version
    )


def record_optout_folder(instance: dg.DagsterInstance, folder: str) -> None:
    """Record the opt-out folder's current version when it differs from the last one recorded,
    as the sensor does: runs outside the daemon (the CLI) leave the instance as the UI expects."""
    version, count = optout_folder_version(folder)
    if observed_optout_version(instance) != version:
        instance.report_runless_asset_event(optout_observation(version, count, folder))
