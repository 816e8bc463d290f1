"""Which sources a ``prx-data run`` runs, and whether the corpus assets run, from the recorded
inputs of the last successful runs (``run_inputs``). Decided before any Ray start or Dagster run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prx_data.app.run_inputs import (
    CORPUS,
    RunRecords,
    SourceInputs,
    corpus_fingerprint,
    source_inputs,
    table_versions,
)
from prx_data.core.paths import StoragePaths
from prx_data.curation.optout.requests import folder_version
from prx_data.defs.code_versions import asset_code_versions


@dataclass
class RunPlan:
    inputs: dict[str, SourceInputs]
    to_run: list[str]
    unchanged: list[str]
    code_versions: dict[str, str]
    optout_version: str
    all_sources: list[str]
    records: RunRecords
    paths: StoragePaths
    corpus_changed: bool = True
    _corpus_fp: str | None = field(default=None, repr=False)

    def corpus_needed(self, outcome: dict[str, bool] | None = None) -> bool:
        """The corpus assets run when a source ran (and succeeded) or their own inputs changed."""
        ran = [s for s, ok in (outcome or {}).items() if ok]
        return bool(ran) or self.corpus_changed

    def expects_ray(self, local_max_rows: int) -> bool:
        """Whether a source to run has grown, by its listing, by more rows than the stages run
        locally: its stages will then run on Ray, so Ray can start now, beside the run's set-up
        and ingest, instead of once ingest has written that many rows (``prefetch_ray``).
        Growth, not size: a re-run that adds a few files to a large source stays local."""
        for name in self.to_run:
            rows = self.inputs[name].listed_rows
            if rows is None or rows - self.records.listed_rows(name) > local_max_rows:
                return True
        return False


def _source_tables(paths: StoragePaths, source: str) -> list[str]:
    return [paths.raw_table(source), paths.exports_table(source)]


def plan_run(settings, registry, sources: list[str], *, force: bool = False) -> RunPlan:
    """Decided without the Definitions or Dagster: a run with nothing to do loads neither."""
    code_versions = asset_code_versions()
    optout_version = folder_version(settings.optout_dir)[0]
    paths = StoragePaths.from_settings(settings)
    records = RunRecords(settings.lance_root, settings.storage_options)
    all_sources = sorted(registry.sources)
    inputs = {
        name: source_inputs(registry.sources[name], code_versions=code_versions, settings=settings, optout_version=optout_version)
        for name in all_sources
    }
    to_run, unchanged = [], []
    for name in sources:
        tables = table_versions(_source_tables(paths, name), settings.storage_options)
        if not force and records.unchanged(name, inputs[name].fingerprint, tables):
            unchanged.append(name)
        else:
            to_run.append(name)
    plan = RunPlan(inputs, to_run, unchanged, code_versions, optout_version, all_sources, records, paths)
    fp = _corpus_fp(plan, settings)
    plan._corpus_fp = fp
    plan.corpus_changed = force or not records.unchanged(CORPUS, fp, {})
    return plan


def _corpus_fp(plan: RunPlan, settings) -> str:
    tables = table_versions([t for s in plan.all_sources for t in _source_tables(plan.paths, s)], settings.storage_options)
    return corpus_fingerprint(
        {s: plan.inputs[s] for s in plan.all_sources},
        tables,
        code_versions=plan.code_versions,
        settings=settings,
        optout_version=plan.optout_version,
    )


def record_sources(plan: RunPlan, outcome: dict[str, bool], settings) -> None:
    """Record the inputs (as listed before the run) of each source that succeeded: a file
    changed during the run makes the next run run it again."""
    for name, ok in outcome.items():
        fingerprint = plan.inputs[name].fingerprint
        if ok and fingerprint is not None:
            tables = table_versions(_source_tables(plan.paths, name), settings.storage_options)
            plan.records.write(name, fingerprint, tables, plan.inputs[name].listed_rows)


def record_corpus(plan: RunPlan, settings) -> None:
    """After a successful corpus run: the corpus inputs as they are now (the sources' tables at
    the versions the corpus assets read)."""
    plan.records.write(CORPUS, _corpus_fp(plan, settings), {})
