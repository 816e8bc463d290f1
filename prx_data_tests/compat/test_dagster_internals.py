"""Pins what prx_data.defs.compat.dagster_internals relies on in Dagster: a run created with a
code-location origin and executed in this process, the run-retry tag, the auto-materialize flag."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._daemon.asset_daemon import get_auto_materialize_paused

from prx_data.defs.compat import dagster_internals as compat


def test_installed_dagster_is_the_version_the_adapter_was_written_for() -> None:
    assert compat.version_mismatch() is None, compat.version_mismatch()


@dg.op
def _noop() -> int:
    return 1


@dg.job(executor_def=dg.in_process_executor)  # as the named jobs: executed in this process
def tiny() -> None:
    _noop()


def test_a_run_executed_here_is_recorded_under_the_workspace_origin(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text("load_from:\n  - python_module:\n      module_name: prx_data.definitions\n      location_name: prx_data\n")
    (location,) = compat.workspace_location_origins(workspace)
    assert location.location_name == "prx_data"
    origin = compat.repository_origin(location, "__repository__")
    with dg.DagsterInstance.ephemeral() as instance:
        run = instance.create_run_for_job(
            job_def=tiny,
            tags={compat.MAX_RETRIES_TAG: "0"},
            remote_job_origin=compat.job_origin(origin, "tiny"),
            job_code_origin=compat.module_job_code_origin("prx_data.definitions", "defs", "tiny"),
        )
        result = compat.execute_in_this_process(tiny, run, instance)
        assert result.success and result.run_id == run.run_id
        stored = instance.get_run_by_id(run.run_id)
        assert stored is not None and stored.status == dg.DagsterRunStatus.SUCCESS
        assert stored.remote_job_origin is not None and stored.remote_job_origin.location_name == "prx_data"
        assert stored.remote_job_origin.repository_origin.repository_name == "__repository__"
        assert stored.job_code_origin is not None and stored.job_code_origin.job_name == "tiny"
        assert stored.tags["dagster/max_retries"] == "0"


def test_the_auto_materialize_flag_is_the_one_the_ui_reads() -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        assert get_auto_materialize_paused(instance)  # unset reads as paused
        compat.show_auto_materialize_unpaused(instance)
        assert not get_auto_materialize_paused(instance)
