"""Run a named job of the code location in this process, as a run the UI knows as that job's.

``JobDefinition.execute_in_process`` records a run with no code-location origin: the Overview
timeline leaves such runs out (it groups runs by their repository origin), the run page cannot
link to the job, and its "Re-execute" has nothing to reload. Here the run is created with the
origin the UI's own workspace (``workspace.yaml``) gives the job, and then executed in this
process with the job exactly as defined (its in-process executor, resources and tags). The
origin is read from the workspace file, not by loading the code location a second time: only its
location name and the repository name decide where the UI lists the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import dagster as dg

from prx_data.defs.compat.dagster_internals import (
    MAX_RETRIES_TAG,
    RemoteRepositoryOrigin,
    execute_in_this_process,
    job_origin,
    module_job_code_origin,
    workspace_location_origins,
)
from prx_data.defs.compat.dagster_internals import repository_origin as _repository_origin

# The module the workspace loads; the code origin names it so a run can be reconstructed from it.
DEFINITIONS_MODULE = "prx_data.definitions"


def repository_origin(workspace: Path, defs: dg.Definitions, location_name: str | None = None) -> RemoteRepositoryOrigin:
    """The origin of ``defs``' repository in the code location ``workspace`` declares (its only
    one, or ``location_name``)."""
    origins = list(workspace_location_origins(workspace))
    if location_name is not None:
        origins = [o for o in origins if o.location_name == location_name]
    if len(origins) != 1:
        names = ", ".join(o.location_name for o in origins) or "none"
        raise ValueError(
            f"{workspace} must declare exactly one code location{f' named {location_name!r}' if location_name else ''}; found: {names}"
        )
    return _repository_origin(origins[0], defs.get_repository_def().name)


def execute_named_job(
    defs: dg.Definitions,
    job_name: str,
    instance: dg.DagsterInstance,
    origin: RemoteRepositoryOrigin,
    *,
    partition_key: str | None = None,
    run_config: Mapping | None = None,
    tags: Mapping[str, str] | None = None,
) -> dg.ExecutionResult:
    """One run of ``job_name`` executed here, recorded under ``origin`` (see the module doc).

    The run carries ``dagster/max_retries=0``: the caller reports the outcome and decides; a UI
    daemon running meanwhile must not re-launch the run behind the caller's back (it could,
    now that the run names a code location)."""
    job = defs.resolve_job_def(job_name)
    run_tags = {**job.run_tags, **(tags or {}), MAX_RETRIES_TAG: "0"}
    if partition_key is not None:
        with dg.partition_loading_context(dynamic_partitions_store=instance) as context:
            job.validate_partition_key(partition_key, selected_asset_keys=None, context=context)
        run_tags.update(job.get_tags_for_partition_key(partition_key, selected_asset_keys=None))
    run = instance.create_run_for_job(
        job_def=job,
        run_config=dict(run_config or {}),
        tags=run_tags,
        remote_job_origin=job_origin(origin, job_name),
        job_code_origin=module_job_code_origin(DEFINITIONS_MODULE, "defs", job_name),
    )
    return execute_in_this_process(job, run, instance)
