"""Run the asset graph from Python (the CLI and the demo): the same jobs the UI launches, on the
Dagster instance of ``DAGSTER_HOME``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import dagster as dg

from prx_data.core.permanent_errors import permanent_cause
from prx_data.defs.conditions import show_automation_on
from prx_data.defs.named_runs import execute_named_job, repository_origin
from prx_data.defs.partitions import SOURCES_PARTITION

# Step lifecycle events are noise on a terminal; the asset bodies log what matters at INFO.
QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# How a run was started, on every run: "cli" here, "sensor" / automation / the UI elsewhere.
CLI_TAGS = {"prx/launched_by": "cli"}


def ensure_partitions(instance: dg.DagsterInstance, sources: Iterable[str]) -> None:
    known = set(instance.get_dynamic_partitions(SOURCES_PARTITION))
    new = [s for s in sources if s not in known]
    if new:
        instance.add_dynamic_partitions(SOURCES_PARTITION, new)


def open_instance(sources: Iterable[str]) -> dg.DagsterInstance:
    """The Dagster instance with the sources' partitions; two runs starting at once on a new
    root take turns here, or both create its SQLite storages and fail."""
    # lazy: pulls in pyarrow, numpy
    from prx_data.core.locking import dagster_home_lock

    with dagster_home_lock():
        instance = dg.DagsterInstance.get()
        ensure_partitions(instance, sources)
    return instance


def show_automation_on_in_home() -> None:
    """What ``prx-data ui`` does before it starts the UI (see ``conditions.show_automation_on``)."""

    with dg.DagsterInstance.get() as instance:
        show_automation_on(instance)


def materialize_sources(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    sources: Iterable[str],
    workspace: Path,
    log: Callable[[str], None] = print,
    reread_unchanged: bool = False,
) -> dict[str, bool]:
    """Run the per-source chain for each source, each a ``source_pipeline`` run of the code
    location ``workspace`` declares (listed with the UI's runs); one failing source does not stop
    the others. ``reread_unchanged`` opens every object of each source (``--force``)."""
    sources = list(sources)
    ensure_partitions(instance, sources)
    origin = repository_origin(workspace, defs)
    outcome = {}
    for source in sources:
        log(f"[{source}] materializing the per-source chain ...")
        run_config = {**QUIET, "ops": {"raw_samples": {"config": {"reread_unchanged": True}}}} if reread_unchanged else QUIET
        result = execute_named_job(defs, "source_pipeline", instance, origin, partition_key=source, run_config=run_config, tags=CLI_TAGS)
        outcome[source] = result.success
        if not result.success:
            # One line per cause: steps that failed for the same reason (a wrong Ray token fails
            # every Ray step) are named together.
            causes: dict[str, list[str]] = {}
            for event in result.all_events:
                if event.is_step_failure:
                    causes.setdefault(failure_line(event.step_failure_data.error), []).append(event.step_key)
            for cause, steps in causes.items():
                log(f"[{source}] FAILED in {', '.join(steps)}: {cause}")
    return outcome


def failure_line(error) -> str:
    """The cause of a step failure (Dagster's ``SerializableErrorInfo``) in one line: a cause no
    retry fixes wherever it sits in the chain (``core.permanent_errors``), else the first line
    of the error's own message, without the exception's module path."""
    if error is None:
        return "no error recorded"
    link = error
    seen: list[Any] = []
    while link is not None and len(seen) < 20:
        seen.append(link)
        link = link.cause or link.context
    for link in seen:
        if link.cls_name == "PermanentError" or "(set " in link.message and "not retried)" in link.message:
            return _first_line(link.message)
    for link in seen:
        cause = permanent_cause(RuntimeError(link.message))
        if cause is not None:
            return cause.line()
    return _first_line(error.message)


def _first_line(message: str) -> str:
    first = (message.strip().splitlines() or [""])[0].strip()
    head, sep, rest = first.partition(": ")
    # "dagster._core.definitions.events.Failure: ..." -> "..."
    return rest.strip() if sep and "." in head and " " not in head else first


def materialize_corpus(defs: dg.Definitions, instance: dg.DagsterInstance, workspace: Path, log: Callable[[str], None] = print) -> bool:
    job = defs.resolve_job_def("corpus")
    if not job.asset_layer.executable_asset_keys:
        return True
    # lazy: pulls in pyarrow, numpy, tqdm
    from prx_data.defs.curation.optout_folder import record_optout_folder

    # What the opt-out sensor would record: the UI opened later sees the folder as unchanged.
    registry = (defs.resources or {}).get("registry")
    if registry is None:
        raise ValueError("the corpus job needs the 'registry' resource (SourceRegistryResource) in the Definitions")
    record_optout_folder(instance, registry.optout_dir)
    log("[corpus] materializing corpus-wide assets ...")
    result = execute_named_job(defs, "corpus", instance, repository_origin(workspace, defs), run_config=QUIET, tags=CLI_TAGS)
    return result.success
