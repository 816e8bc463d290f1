"""Dagster: running a job in this process as a run of its code location, and the pre-sensor
auto-materialize flag.

- ``JobDefinition.execute_in_process`` records a run with no code-location origin, which the UI
  leaves out of its timeline (``defs/named_runs.py`` says why that matters). A run created with a
  remote origin and executed in process takes the pieces ``execute_in_process`` is built from:
  the workspace file's code-location origins, ``RemoteRepositoryOrigin`` / ``RemoteJobOrigin``,
  a ``ReconstructableRepository``'s job origin, and ``execute_run`` over an ``InMemoryJob``.
- ``MAX_RETRIES_TAG`` is the run tag the run-retry daemon reads (``dagster/max_retries``).
- ``set_auto_materialize_paused``: the UI's job pages read the pre-sensor asset daemon's pause
  flag, which has no public setter.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import execute_run
from dagster._core.origin import JobPythonOrigin
from dagster._core.remote_origin import CodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.tags import MAX_RETRIES_TAG
from dagster._core.workspace.load_target import WorkspaceFileTarget

WRITTEN_FOR = "1.13.28"

__all__ = [
    "MAX_RETRIES_TAG",
    "RemoteRepositoryOrigin",
    "WRITTEN_FOR",
    "execute_in_this_process",
    "job_origin",
    "module_job_code_origin",
    "repository_origin",
    "show_auto_materialize_unpaused",
    "version_mismatch",
    "workspace_location_origins",
]


def workspace_location_origins(workspace: Path) -> Sequence[CodeLocationOrigin]:
    """The code-location origins ``workspace`` (a workspace.yaml) declares, without loading them."""
    return WorkspaceFileTarget(paths=[str(workspace)]).create_origins()


def repository_origin(location: CodeLocationOrigin, repository_name: str) -> RemoteRepositoryOrigin:
    return RemoteRepositoryOrigin(code_location_origin=location, repository_name=repository_name)


def job_origin(repository: RemoteRepositoryOrigin, job_name: str) -> RemoteJobOrigin:
    return RemoteJobOrigin(repository_origin=repository, job_name=job_name)


def module_job_code_origin(module: str, attribute: str, job_name: str) -> JobPythonOrigin:
    """Where a run worker would load ``job_name`` from (``attribute`` of ``module``, this
    Python); nothing is loaded to build it."""
    return ReconstructableRepository.for_module(module, attribute).get_reconstructable_job(job_name).get_python_origin()


def execute_in_this_process(job: dg.JobDefinition, run: dg.DagsterRun, instance: dg.DagsterInstance) -> dg.ExecutionResult:
    """Execute the already created ``run`` of ``job`` here, with the job exactly as defined (its
    executor, resources and tags); failures are in the result, not raised."""
    return execute_run(InMemoryJob(job), run, instance, raise_on_error=False)


def show_auto_materialize_unpaused(instance: dg.DagsterInstance) -> None:
    # lazy: the daemon package loads ~400 modules (rich, pygments among them) the code location
    # never needs; only `prx-data ui` calls this
    from dagster._daemon.asset_daemon import set_auto_materialize_paused

    set_auto_materialize_paused(instance, False)


def version_mismatch() -> str | None:
    """Why the installed Dagster may not be the one these adapters were written for, or None."""
    if dg.__version__ == WRITTEN_FOR:
        return None
    return (
        f"dagster is {dg.__version__}, prx_data.defs.compat.dagster_internals was written for {WRITTEN_FOR}: "
        "re-check that a run created with a RemoteJobOrigin and run through execute_run(InMemoryJob(job), ...) "
        "is still listed under its code location, that MAX_RETRIES_TAG is still the run-retry daemon's tag, "
        "and that the UI still reads set_auto_materialize_paused's flag, then update WRITTEN_FOR"
    )
