"""The executor of every launched run, automation runs included (the implicit asset job has no
config of its own). Its own module: a module with a ``@dg.definitions`` function contributes only
what that function returns, so module-level jobs or assets beside it would be dropped."""

import dagster as dg

from prx_data.defs.automation import SOURCE_TABLE_WRITER_TAG


@dg.definitions
def executor() -> dg.Definitions:
    """At most one op tagged as a writer of the run's source table at a time.

    raw_samples, phashes, captions and caption_labels each commit to the source's Lance table;
    phashes and captions only depend on raw_samples, so the multiprocess executor would start them
    together and the later commit would fail with a commit conflict. Runs of different sources
    write different tables and are kept apart per partition by the run queue (see dagster.yaml).
    ``execute_in_process`` (tests, the CLI) runs steps one by one and ignores this.
    """
    ((key, value),) = SOURCE_TABLE_WRITER_TAG.items()
    return dg.Definitions(
        executor=dg.multiprocess_executor.configured({"tag_concurrency_limits": [{"key": key, "value": value, "limit": 1}]})
    )
