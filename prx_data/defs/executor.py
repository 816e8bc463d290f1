"""The executor of every launched run, automation runs included (the implicit asset job has no
config of its own). Its own module: a module with a ``@dg.definitions`` function contributes only
what that function returns, so module-level jobs or assets beside it would be dropped."""

import dagster as dg


@dg.definitions
def executor() -> dg.Definitions:
    """Every step of a run in the run's own process, one after the other: the same way the CLI
    (``execute_in_process``) runs them, so a chain costs the same from the UI as from the CLI.

    One process per step (the multiprocess executor) paid a Python start, the imports, a Ray
    start and the resources' set-up for every step, minutes per chain on a small source, and the
    chain gains nothing from parallel steps: raw_samples, phashes, captions and caption_labels
    all commit to the same Lance table of the run's source (one writer at a time) and
    mds_shards needs all of them. The work inside a step is parallel on Ray, and the steps of a
    run share one Ray connection (``prx_data.app.local_ray`` keeps one Ray per command locally).
    Runs of different sources still run side by side, kept apart per partition by the run queue
    (dagster.yaml).
    """
    return dg.Definitions(executor=dg.in_process_executor)
