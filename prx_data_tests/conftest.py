"""Shared fixtures: an isolated data root, a real Dagster instance, and helpers to run
partitions through the real job."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from prx_data.settings import get_settings

    root = tmp_path / "data"
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    for name in list(os.environ):
        if name.startswith("PRX_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    get_settings.cache_clear()
    yield root
    get_settings.cache_clear()


@pytest.fixture
def prx_defs(data_root: Path) -> dg.Definitions:
    from prx_data.definitions import build_defs

    return build_defs()


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def run_source(defs: dg.Definitions, instance: dg.DagsterInstance, source: str, selection=None):
    """Materialize one source partition through the real per-source job."""
    from prx_data.defs.partitions import sources_partitions

    if source not in instance.get_dynamic_partitions(sources_partitions.name):
        instance.add_dynamic_partitions(sources_partitions.name, [source])
    job = defs.resolve_job_def("source_pipeline")
    kwargs = {"asset_selection": selection} if selection else {}
    return job.execute_in_process(instance=instance, partition_key=source, raise_on_error=False, **kwargs)


def materializations(result, asset: str) -> list[dg.AssetMaterialization]:
    return [
        e.event_specific_data.materialization
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
        and e.event_specific_data.materialization.asset_key.to_user_string() == asset
    ]
