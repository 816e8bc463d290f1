"""The local profile's run coordinator: Dagster's run queue, with runs launched from the UI
tagged ``prx/launched_by=ui`` as the CLI, the sensors and automation tag theirs.

The UI marks what it launches ``dagster/from_ui``; the tag is added when the run is submitted,
before it is queued, so it is on the run from its first event (the Runs page filters by it).
Named in ``prx_data/app/resources/dagster.yaml``; the queue's limits stay under ``concurrency``.
"""

from __future__ import annotations

import dagster as dg

LAUNCHED_BY = "prx/launched_by"
FROM_UI = "dagster/from_ui"


class TaggingRunCoordinator(dg.QueuedRunCoordinator):
    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        if run.tags.get(FROM_UI) == "true" and LAUNCHED_BY not in run.tags:
            instance = context.workspace.instance
            instance.add_run_tags(run.run_id, {LAUNCHED_BY: "ui"})
            tagged = instance.get_run_by_id(run.run_id)
            if tagged is not None:
                context = dg.SubmitRunContext(tagged, context.workspace)
        return super().submit_run(context)
