"""The registry sensor: a new source spec becomes a partition; a changed spec re-ingests.

The sensor only adds partitions and requests ``raw_samples``; declarative automation
(``prx_data/defs/conditions.py``) requests the rest of the chain: a new partition is missing, so
its whole chain is requested in one run, and a re-ingested ``raw_samples`` is an upstream update
for the stages below it. A second path that ran the chain too would run it twice.

Idempotent start: every ``raw_samples`` materialization records the fingerprint of the spec it
ingested. A tick that has not seen a source yet (the first tick after ``prx-data demo`` or
``run``, a reset cursor) compares the spec with that record instead of assuming a change, so
opening the UI on built data launches nothing.
"""

import json
from pathlib import Path

import dagster as dg

from prx_data.core.ids import printable
from prx_data.core.settings import get_settings
from prx_data.curation.retire import receipts
from prx_data.defs.ingest.registry_status import problems_digest, problems_evaluation, problems_summary, registry_problems
from prx_data.defs.ingest.retire_job import RETIRE_TAG, retire_source_job
from prx_data.defs.jobs import source_pipeline_job
from prx_data.defs.partitions import SOURCE_TAG_FINGERPRINT, SOURCES_PARTITION, sources_partitions
from prx_data.defs.resources import SourceRegistryResource, StorageResource
from prx_data.ingest.registry import wide_root_warning

RETIRE_JOB = "retire_source"

RAW_SAMPLES = dg.AssetKey("raw_samples")


def ingested_fingerprint(instance: dg.DagsterInstance, source: str) -> str | None:
    """The spec fingerprint recorded by the latest raw_samples materialization of ``source``."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=RAW_SAMPLES, asset_partitions=[source]), limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    value = records[0].asset_materialization.metadata.get("spec_fingerprint")
    return None if value is None else str(value.value)


def _load_cursor(raw: str | None) -> dict:
    """{"seen": {source: fingerprint}, "problems": digest}; older cursors held ``seen`` alone."""
    data = json.loads(raw) if raw else {}
    if "seen" not in data:
        data = {"seen": data}
    return data


def retire_request(name: str, retired_before: int) -> dg.RunRequest:
    return dg.RunRequest(
        job_name=RETIRE_JOB,
        # One retirement per removal: a failed one is not relaunched every tick (re-execute it
        # from the UI); after a re-add and a second removal the count differs.
        run_key=f"retire:{name}:{retired_before}",
        run_config={"ops": {"retire": {"config": {"source": name}}}},
        tags={RETIRE_TAG: name, "prx/launched_by": "sensor"},
    )


def readd_request(name: str, fingerprint: str) -> dg.RunRequest:
    """A source retired earlier and added again: its partition has materializations, so it is
    not "missing" for automation; the whole chain is asked for here (the export starts afresh)."""
    return dg.RunRequest(
        job_name=source_pipeline_job.name,
        partition_key=name,
        run_key=f"readd:{name}:{fingerprint}",
        tags={SOURCE_TAG_FINGERPRINT: fingerprint, "prx/launched_by": "sensor"},
    )


def source_registry_tick(context: dg.SensorEvaluationContext, registry: SourceRegistryResource, storage: StorageResource):
    reg = registry.load(storage)
    problems = registry_problems(reg, registry.optout_dir)
    known = set(context.instance.get_dynamic_partitions(SOURCES_PARTITION))
    state = _load_cursor(context.cursor)
    if state.get("problems") != problems_digest(problems):
        # Once per change, not every 30 s: the skip reason and the check say it on every tick.
        for problem in problems:
            context.log.error(printable(f"bad {problem.kind}: {problem.file}: {problem.message}"))
        for source in reg.sources.values():
            if warning := wide_root_warning(source):
                context.log.warning(printable(warning))
    seen: dict[str, str] = state["seen"]
    new_partitions = sorted(name for name in reg.sources if name not in known)
    run_requests = []
    for name, source in sorted(reg.sources.items()):
        fingerprint = source.fingerprint
        if seen.get(name) == fingerprint and name in known:
            continue
        seen[name] = fingerprint
        if name not in known:
            if ingested_fingerprint(context.instance, name) is not None:
                run_requests.append(readd_request(name, fingerprint))
            continue  # missing in a new partition: automation requests its whole chain
        if ingested_fingerprint(context.instance, name) == fingerprint:
            continue  # not seen by this cursor, but its table already holds this spec
        # A known partition whose spec changed since its table was ingested, or that was never
        # ingested: re-ingest is incremental, so asking is cheap.
        run_requests.append(
            dg.RunRequest(
                job_name=source_pipeline_job.name,
                partition_key=name,
                run_key=f"{name}:{fingerprint}",
                asset_selection=[RAW_SAMPLES],
                tags={SOURCE_TAG_FINGERPRINT: fingerprint, "prx/launched_by": "sensor"},
            )
        )
    # A spec that broke is not a removal: its file is still there (named after the source by
    # convention), and the source keeps its last good tables and export.
    broken = {Path(p.file).stem for p in problems if p.kind == "source spec"}
    # Nor is a name two specs claim with no owner to tell: its tables stay until one spec goes.
    removed = sorted(name for name in known if name not in reg.sources and name not in broken and name not in reg.contested)
    # A partition that never ingested anything has nothing to archive: typically a name typed
    # into the UI's "Add partition" (which Dagster's UI cannot hide, docs/ui.md). It is dropped
    # on this tick, with no retire run and no receipt on the data card.
    never_ingested = [name for name in removed if ingested_fingerprint(context.instance, name) is None]
    for name in never_ingested:
        context.log.warning(printable(f"partition {name!r} has no spec and was never ingested: removed"))
    for name in removed:
        seen.pop(name, None)
        if name not in never_ingested:
            run_requests.append(retire_request(name, len(receipts(storage.mds_root, storage.options, source=name))))
    partition_requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    if new_partitions:
        partition_requests.append(sources_partitions.build_add_request(new_partitions))
    if never_ingested:
        partition_requests.append(sources_partitions.build_delete_request(never_ingested))
    digest = problems_digest(problems)
    events = [problems_evaluation(problems, len(reg.sources))] if state.get("problems") != digest else []
    cursor = json.dumps({"seen": seen, "problems": digest}, sort_keys=True)
    if not run_requests and not partition_requests:
        if problems:
            skip = dg.SkipReason(
                f"{problems_summary(problems)} (listed by the source_registry check; the other {len(reg.sources)} source(s) go on)"
            )
        else:
            skip = dg.SkipReason(f"{len(reg.sources)} source(s), none new, changed or removed")
        # Keep what this tick learnt from the tables, so later ticks compare with the cursor only.
        if cursor == context.cursor and not events:
            return skip
        return dg.SensorResult(skip_reason=skip, cursor=cursor, asset_events=events)
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=partition_requests,
        cursor=cursor,
        asset_events=events,
    )


def source_registry_sensor(interval_s: int) -> dg.SensorDefinition:
    """The registry sensor, ticking at most every ``interval_s`` seconds (PRX_SENSOR_INTERVAL_S)."""
    return dg.sensor(
        name="source_registry_sensor",
        jobs=[source_pipeline_job, retire_source_job],
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Watches the source registry folder: adds a partition per new source (automation "
        "then runs its chain), re-ingests a source whose spec changed, and retires the partition of a "
        "removed spec (retire_source). Bad specs and opt-out requests skip the tick with the reason "
        "and turn the source_registry check red; the other sources go on.",
    )(source_registry_tick)


@dg.definitions
def defs() -> dg.Definitions:
    """Built when the Definitions load, so the tick interval follows the settings of that load."""
    return dg.Definitions(sensors=[source_registry_sensor(get_settings().sensor_interval_s)])
