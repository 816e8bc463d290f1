"""The opt-out folder as an observable source asset, and the sensor that observes it.

A changed folder is a new data version of ``optout_folder``, which requests ``optout_requests``
and what depends on it (``CORPUS_SETTLED``), nothing per source.
"""

from __future__ import annotations

import dagster as dg

from prx_data.core.settings import get_settings
from prx_data.curation.optout.requests import folder_version, load_requests
from prx_data.defs import links
from prx_data.defs.resources import SourceRegistryResource

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
    version, count = folder_version(folder)
    return dg.ObserveResult(data_version=dg.DataVersion(version), metadata={"files": count, "folder": links.location(folder)})


def optout_folder_tick(context: dg.SensorEvaluationContext, registry: SourceRegistryResource):
    version, count = folder_version(registry.optout_dir)
    # A first tick (no cursor) compares with the version last recorded in the instance (by an
    # earlier sensor or by `prx-data run`), so opening the UI on built data records nothing new.
    baseline = context.cursor or observed_optout_version(context.instance)
    if baseline == version:
        skip = dg.SkipReason(f"opt-out folder unchanged ({count} file(s))")
        return skip if context.cursor == version else dg.SensorResult(skip_reason=skip, cursor=version)
    # Said on the tick (shown as skipped: no run of its own): automation picks the change up.
    bad = load_requests(registry.optout_dir).errors
    note = f"; {len(bad)} bad request(s) left out, listed by the source_registry check: " + "; ".join(bad) if bad else ""
    return dg.SensorResult(
        asset_events=[optout_observation(version, count, registry.optout_dir)],
        cursor=version,
        skip_reason=dg.SkipReason(
            f"opt-out folder changed ({count} file(s)): recorded version {version[:12]}, which triggers a refresh "
            f"of optout_requests, skip_lists and corpus_report by automation{note}"
        ),
    )


def optout_folder_sensor(interval_s: int) -> dg.SensorDefinition:
    """The opt-out folder's sensor, ticking at most every ``interval_s`` seconds (PRX_SENSOR_INTERVAL_S)."""
    return dg.sensor(
        name="optout_folder_sensor",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Records an observation of optout_folder when the folder's content changed "
        "(no run is launched for the observation itself).",
    )(optout_folder_tick)


def optout_observation(version: str, count: int, folder: str) -> dg.AssetObservation:
    return dg.AssetObservation(
        asset_key=OPTOUT_FOLDER,
        # The tag observe functions write: automation compares these data versions.
        tags={"dagster/data_version": version},
        metadata={"files": count, "folder": links.location(folder)},
    )


def observed_optout_version(instance: dg.DagsterInstance) -> str | None:
    records = instance.fetch_observations(OPTOUT_FOLDER, limit=1).records
    if not records or records[0].asset_observation is None:
        return None
    return records[0].asset_observation.tags.get("dagster/data_version") or (records[0].asset_observation.data_version)


def record_optout_folder(instance: dg.DagsterInstance, folder: str) -> None:
    """Record the opt-out folder's current version when it differs from the last one recorded,
    as the sensor does: runs outside the daemon (the CLI) leave the instance as the UI expects."""
    version, count = folder_version(folder)
    if observed_optout_version(instance) != version:
        instance.report_runless_asset_event(optout_observation(version, count, folder))


@dg.definitions
def defs() -> dg.Definitions:
    """The asset and its sensor, built when the Definitions load, so the tick interval follows the
    settings of that load (a module with a ``@dg.definitions`` function contributes only what it
    returns)."""
    return dg.Definitions(assets=[optout_folder], sensors=[optout_folder_sensor(get_settings().sensor_interval_s)])
