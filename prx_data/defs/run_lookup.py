"""Which Dagster runs made a sample's rows: the run details ``prx-data lineage --runs`` prints."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg


def dagster_runs_lookup():
    """(source, sample_id) -> the latest materialization run of each per-source asset."""
    try:
        instance = dg.DagsterInstance.get()
    except Exception:  # noqa: BLE001 - lineage works without a Dagster home, minus run ids
        return None
    assets = ("raw_samples", "phashes", "captions", "caption_labels", "mds_shards")

    def lookup(source: str, _sample_id: str, row: dict | None = None) -> dict[str, dict[str, Any]]:
        runs: dict[str, dict[str, Any]] = {}
        for asset in assets:
            result = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[source]), limit=1
            )
            for record in result.records:
                metadata = record.asset_materialization.metadata if record.asset_materialization else {}
                runs[asset] = {
                    "run_id": record.run_id,
                    "timestamp": datetime.fromtimestamp(record.timestamp, UTC).isoformat(timespec="seconds"),
                }
                if "lance_version" in metadata:
                    runs[asset]["lance_version"] = metadata["lance_version"].value
        # The runs that wrote this row's derived columns (exact, per row), over the latest per asset.
        for asset, column in (("phashes", "phash_run_id"), ("captions", "caption_run_id"), ("caption_labels", "label_run_id")):
            run_id = (row or {}).get(column)
            if run_id:
                run_record = instance.get_run_record_by_id(run_id)
                when = (
                    run_record.create_timestamp.isoformat(timespec="seconds")
                    if run_record is not None
                    else "run not in this Dagster instance"
                )
                runs[asset] = {"run_id": run_id, "timestamp": when, "wrote_this_row": True}
        for asset in ("optout_requests", "skip_lists"):
            event = instance.get_latest_materialization_event(dg.AssetKey(asset))
            if event is not None:
                runs[asset] = {
                    "run_id": event.run_id,
                    "timestamp": datetime.fromtimestamp(event.timestamp, UTC).isoformat(timespec="seconds"),
                }
        return runs

    return lookup
