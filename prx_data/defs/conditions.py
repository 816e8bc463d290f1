"""Declarative automation: a new or changed source flows to the training export by itself.

Who starts what:
- ``source_registry_sensor`` adds a partition for a new spec (nothing else) and requests
  ``raw_samples`` when a known source's spec changed.
- ``PER_SOURCE`` on every per-source asset: a new partition (missing), an upstream update or a
  code-version change requests that partition's chain; the whole chain of one partition lands in
  one run because every step is requested on the same tick.
- ``CORPUS_SETTLED`` on the corpus-wide assets: they run once after the per-source work of a
  batch has settled, not once per partition.
- ``optout_folder`` is observed by ``optout_folder_sensor`` (``defs/curation/optout_folder.py``):
  a changed opt-out folder is a new data version, which requests ``optout_requests`` and what
  depends on it, nothing per source.

Code versions (``defs/code_versions.py``) name what decides each asset's output, so the UI marks
partitions stale when it changes and ``code_version_changed`` re-requests them; the per-row
stages then redo stale rows only.
"""

from __future__ import annotations

import dagster as dg

from prx_data.core.settings import get_settings
from prx_data.defs.compat.dagster_internals import show_auto_materialize_unpaused
from prx_data.defs.partitions import per_source_selection

# eager() plus code_version_changed in the trigger: a new captioner or prompt version must reach
# the partitions that were already current, not only new ones.
PER_SOURCE = (
    (
        dg.AutomationCondition.newly_missing() | dg.AutomationCondition.any_deps_updated() | dg.AutomationCondition.code_version_changed()
    ).since_last_handled()  # type: ignore[misc]  # dagster's stub: `self` typed for AssetKey | AssetCheckKey, not AssetKey
    & ~dg.AutomationCondition.any_deps_missing()
    & ~dg.AutomationCondition.any_deps_in_progress()
    & ~dg.AutomationCondition.in_progress()
).with_label("per_source")

# How far up the graph the corpus assets look for per-source work in flight: corpus_report ->
# skip_lists -> corpus_index -> mds_shards -> caption_labels -> captions -> raw_samples.
_UPSTREAM_DEPTH = 6


def _anywhere_upstream(condition: dg.AutomationCondition, label: str) -> dg.AutomationCondition:
    """True when any asset upstream, at any depth, matches ``condition``.

    Direct deps are not enough: skip_lists depends on caption_labels (which a chain run has
    already materialized) and on corpus_index, and would start while that run still exports the
    source's shards to mds_shards, upstream of corpus_index only; then run again after it.
    """
    reach = condition
    for _ in range(_UPSTREAM_DEPTH - 1):
        reach = condition | dg.AutomationCondition.any_deps_match(reach)
    return dg.AutomationCondition.any_deps_match(reach).with_label(label)


# Per-source work not finished: a run planned to materialize an asset partition upstream and has
# not yet (queued or running, exports included).
_upstream_in_progress = _anywhere_upstream(dg.AutomationCondition.in_progress(), "upstream_in_progress")

# A per-source parent that is about to start is as good as running: without this, the corpus
# assets would be requested on the very tick that requests the chain of a new source (any
# dep "will be requested" counts as updated) and run before the chain, then again after it.
# Direct deps suffice here: a corpus asset whose per-source parents wait holds back the corpus
# assets below it, which only react to it.
_per_source_parent_starting = dg.AutomationCondition.any_deps_match(dg.AutomationCondition.will_be_requested()).allow(per_source_selection)

# No ~any_deps_missing here, unlike eager(): the corpus depends on every partition, and one
# source that never exported (a broken spec) must not hold the whole corpus back.
CORPUS_SETTLED = (
    dg.AutomationCondition.any_deps_updated().since_last_handled()
    & ~_upstream_in_progress
    & ~_per_source_parent_starting.with_label("per_source_parent_starting")
    & ~dg.AutomationCondition.in_progress()
).with_label("corpus_settled")


def automation_sensor(interval_s: int) -> dg.AutomationConditionSensorDefinition:
    """The automation sensor, ticking at most every ``interval_s`` seconds (PRX_SENSOR_INTERVAL_S)."""
    return dg.AutomationConditionSensorDefinition(
        "prx_automation",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=interval_s,
        # One run per source partition holding its whole chain, listed per source in the runs
        # view, rather than a backfill whenever a tick requests more than one partition.
        emit_backfills=False,
        # Dagster 1.13 launches asset-level automation as the implicit asset job (`__ASSET_JOB`,
        # "Jobless asset materializations" in the UI); only job-level conditions launch a named
        # job, and those run the whole job, not the stale part of a chain (docs/ui.md). The tag
        # says how these runs started, beside the CLI's and the sensor's.
        run_tags={"prx/launched_by": "automation"},
        description="Runs each source's chain when it is new, its upstream changed or its code "
        "version changed, and the corpus-wide assets once the per-source work has settled.",
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Built when the Definitions load, so the tick interval follows the settings of that load."""
    return dg.Definitions(sensors=[automation_sensor(get_settings().sensor_interval_s)])


def show_automation_on(instance: dg.DagsterInstance) -> None:
    """Clear the pre-sensor auto-materialize pause flag, which nothing here uses (automation runs
    as ``prx_automation``, an automation condition sensor) but which the UI's job pages read:
    left unset, they say "Auto-materialize off" while automation runs."""
    show_auto_materialize_unpaused(instance)
