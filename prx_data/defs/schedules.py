"""Schedules: daily table maintenance (compaction and index refresh of every Lance table).

``table_maintenance`` is left out of declarative automation on purpose: compaction rewrites
fragments under the per-source writers, so it runs once a day at a quiet hour instead of after
every change, and a writer that meets its commit retries (policies.TRANSIENT_RETRY).
"""

import dagster as dg

TABLE_MAINTENANCE = dg.AssetKey("table_maintenance")

maintenance_job = dg.define_asset_job(
    "maintenance",
    selection=dg.AssetSelection.assets(TABLE_MAINTENANCE),
    description="Compacts every source and exports table and brings its indexes up to date.",
)

maintenance_schedule = dg.ScheduleDefinition(
    name="maintenance_daily",
    job=maintenance_job,
    cron_schedule="0 3 * * *",
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="table_maintenance once a day at 03:00 UTC.",
)
