"""Dagster on PostgreSQL, configured by the deployment's own dagster.yaml: a partition of the
real raw_samples asset materializes, and its run and events are read back from the database,
through a second DagsterInstance and with plain SQL."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import psycopg2
import pytest

from prx_data.defs.cluster import libpq_url
from prx_data_tests import images
from prx_data_tests.deploy.conftest import DEPLOYMENTS

DOCKER_DAGSTER_YAML = DEPLOYMENTS / "docker" / "dagster.yaml"


def _dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(DOCKER_DAGSTER_YAML, home / "dagster.yaml")
    return home


def test_raw_samples_partition_runs_on_postgres(tmp_path: Path, postgres_url: str, clean_prx_env):
    monkeypatch = clean_prx_env
    data_root = tmp_path / "data"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(images.jpeg(640, 480, seed=1))
    (folder / "b.jpg").write_bytes(images.jpeg(480, 640, seed=2))
    (folder / "broken.jpg").write_bytes(b"not an image")
    (data_root / "sources").mkdir(parents=True)
    (data_root / "sources" / "tiny.yaml").write_text(f"name: tiny\nshape: image_folder\nlocation: {folder}\n")
    monkeypatch.setenv("PRX_DATA_ROOT", str(data_root))
    # The DSN reaches Dagster only through the yaml's {env: PRX_POSTGRES_URL}.
    monkeypatch.setenv("PRX_POSTGRES_URL", postgres_url)
    home = _dagster_home(tmp_path)

    from prx_data.definitions import build_defs
    from prx_data.defs.partitions import SOURCES_PARTITION

    defs = build_defs()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        instance.add_dynamic_partitions(SOURCES_PARTITION, ["tiny"])
        job = defs.resolve_job_def("source_pipeline")
        result = job.execute_in_process(instance=instance, partition_key="tiny", asset_selection=[dg.AssetKey("raw_samples")])
        assert result.success
        run_id = result.run_id

    # A second instance (new connections, nothing cached) reads everything back from PostgreSQL.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags.get("dagster/partition") == "tiny"
        assert instance.get_dynamic_partitions(SOURCES_PARTITION) == ["tiny"]
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("raw_samples"), asset_partitions=["tiny"]), limit=10
        ).records
        assert [r.run_id for r in records] == [run_id]
        materialization = records[0].asset_materialization
        assert materialization is not None
        meta = materialization.metadata
        assert meta["rows"].value == 3
        assert meta["rows_by_status"].value == {"invalid_image": 1, "ok": 2}

    # And with plain SQL: the run row and its event log rows are in the database.
    with psycopg2.connect(libpq_url(postgres_url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT status, partition FROM runs WHERE run_id = %s", (run_id,))
        assert cur.fetchall() == [("SUCCESS", "tiny")]
        cur.execute("SELECT dagster_event_type, count(*) FROM event_logs WHERE run_id = %s GROUP BY 1", (run_id,))
        events = dict(cur.fetchall())
        assert events["ASSET_MATERIALIZATION"] == 1
        assert events.get("RUN_SUCCESS", 0) + events.get("PIPELINE_SUCCESS", 0) == 1  # stored under its legacy name
        assert events["STEP_SUCCESS"] >= 1 and "STEP_FAILURE" not in events
        cur.execute("SELECT asset_key FROM asset_keys")
        assert '["raw_samples"]' in {row[0] for row in cur.fetchall()}


def test_missing_database_url_fails_naming_the_setting(tmp_path: Path, clean_prx_env):
    home = _dagster_home(tmp_path)
    with pytest.raises(dg.DagsterInvalidConfigError, match="PRX_POSTGRES_URL"):
        dg.DagsterInstance.from_config(str(home))
