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

import dagster as dg

from prx_data.core.ids import printable
from prx_data.defs.jobs import source_pipeline_job
from prx_data.defs.partitions import SOURCE_TAG_FINGERPRINT, sources_partitions
from prx_data.defs.resources import SourceRegistryResource
from prx_data.ingest.root_check import wide_root_warning

RAW_SAMPLES = dg.AssetKey("raw_samples")


def ingested_fingerprint(instance: dg.DagsterInstance, source: str) -> str | None:
    """The spec fingerprint recorded by the latest raw_samples materialization of ``source``."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=RAW_SAMPLES, asset_partitions=[source]), limit=1
    ).records
    if not records or records[0].asset_materialization is None:
        return None
    value = records[0].asset_materialization.metadata.get("spec_fingerprint")
    return None if value is None else str(value.value)


@dg.sensor(
    job=source_pipeline_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Watches the source registry folder: adds a partition per new source (automation "
    "then runs its chain) and re-ingests a source whose spec changed. Bad specs are reported on "
    "the tick and the other sources go on.",
)
def source_registry_sensor(context: dg.SensorEvaluationContext, registry: SourceRegistryResource):
    reg = registry.load()
    for error in reg.errors:
        context.log.error(f"bad source spec: {printable(error)}")
    for source in reg.sources.values():
        warning = wide_root_warning(source)
        if warning:
            context.log.warning(printable(warning))
    known = set(context.instance.get_dynamic_partitions(sources_partitions.name))
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    new_partitions = sorted(name for name in reg.sources if name not in known)
    run_requests = []
    for name, source in sorted(reg.sources.items()):
        fingerprint = source.fingerprint
        if seen.get(name) == fingerprint and name in known:
            continue
        seen[name] = fingerprint
        if name not in known:
            continue  # missing in a new partition: automation requests its whole chain
        if ingested_fingerprint(context.instance, name) == fingerprint:
            continue  # not seen by this cursor, but its table already holds this spec
        # A known partition whose spec changed since its table was ingested, or that was never
        # ingested: re-ingest is incremental, so asking is cheap.
        run_requests.append(
            dg.RunRequest(
                partition_key=name,
                run_key=f"{name}:{fingerprint}",
                asset_selection=[RAW_SAMPLES],
                tags={SOURCE_TAG_FINGERPRINT: fingerprint},
            )
        )
    cursor = json.dumps(seen, sort_keys=True)
    if not run_requests and not new_partitions:
        detail = f"; {len(reg.errors)} bad spec(s): " + "; ".join(map(str, reg.errors)) if reg.errors else ""
        skip = dg.SkipReason(f"{len(reg.sources)} source(s), none new or changed{detail}")
        # Keep what this tick learnt from the tables, so later ticks compare with the cursor only.
        return skip if cursor == context.cursor else dg.SensorResult(skip_reason=skip, cursor=cursor)
    return dg.SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=[sources_partitions.build_add_request(new_partitions)] if new_partitions else [],
        cursor=cursor,
    )
