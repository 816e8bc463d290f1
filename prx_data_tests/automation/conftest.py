"""Drive declarative automation the way the daemon does, in-process: evaluate the conditions
against the real instance, run what they request through the real jobs, and repeat."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from prx_data_tests import images

PER_SOURCE = ("raw_samples", "phashes", "captions", "caption_labels", "mds_shards")
CORPUS = ("corpus_index", "optout_requests", "skip_lists", "corpus_report")


def requested(result: dg.EvaluateAutomationConditionsResult, defs: dg.Definitions) -> dict[str, set]:
    """{asset: partitions requested} (None for an unpartitioned asset), requested assets only."""
    out = {}
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        partitions = result.get_requested_partitions(key)
        if partitions:
            out[key.to_user_string()] = set(partitions)
    return out


@contextmanager
def dynamic_partitions_read_once(instance: dg.DagsterInstance) -> Iterator[None]:
    """The daemon evaluates a tick through Dagster's caching queryer. The tester
    (``evaluate_automation_conditions``) builds the new cursor against the bare instance: a
    storage query for every condition node of every partitioned asset (about 900 a tick here,
    a new SQLite connection each, about 40 % of these tests' time). Partitions do not change
    during a tick, so here they are read once, as the daemon does."""
    read = instance.get_dynamic_partitions
    cache: dict[str, list[str]] = {}

    def cached(partitions_def_name: str) -> list[str]:
        if partitions_def_name not in cache:
            cache[partitions_def_name] = list(read(partitions_def_name))
        return cache[partitions_def_name]

    instance.get_dynamic_partitions = cached  # type: ignore[method-assign]
    try:
        yield
    finally:
        del instance.get_dynamic_partitions


@dataclass
class Automation:
    defs: dg.Definitions
    instance: dg.DagsterInstance
    cursor: Any = None
    runs: list = field(default_factory=list)  # ExecuteInProcessResult of every run, in order

    def tick(self) -> dict[str, set]:
        with dynamic_partitions_read_once(self.instance):
            result = dg.evaluate_automation_conditions(defs=self.defs, instance=self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        return requested(result, self.defs)

    def run(self, partition: str | None, assets, run_config: dict | None = None):
        """One run of ``assets`` (names) for ``partition``, as a launched run would do them."""
        keys = {dg.AssetKey(a) for a in assets}
        job = self.defs.resolve_job_def("corpus" if partition is None else "source_pipeline")
        result = job.execute_in_process(
            instance=self.instance,
            partition_key=partition,
            asset_selection=sorted(keys),
            raise_on_error=False,
            run_config={**local_stages(keys), **(run_config or {})},
        )
        self.runs.append(result)
        return result

    def launch(self, wanted: dict[str, set]) -> list:
        """One run per partition (the whole requested chain of that source), one for the
        unpartitioned assets, as the automation sensor groups them."""
        by_partition: dict = defaultdict(set)
        for asset, partitions in wanted.items():
            for partition in partitions:
                by_partition[partition].add(dg.AssetKey(asset))
        ordered = sorted(by_partition.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
        return [self.run(partition, [k.to_user_string() for k in keys]) for partition, keys in ordered]

    def settle(self, max_ticks: int = 6) -> list[dict[str, set]]:
        """Tick and run until nothing is requested; the requests of every tick, in order."""
        history: list[dict[str, set]] = []
        for _ in range(max_ticks):
            wanted = self.tick()
            if not wanted:
                return history
            history.append(wanted)
            self.launch(wanted)
        raise AssertionError(f"automation did not settle in {max_ticks} ticks: {history}")


# Where rows are processed is not what these tests are about (prx_data_tests/stages runs the
# stages on Ray); in this process the classifier loads once, not once per run on a new worker.
STAGES = ("phashes", "captions", "caption_labels", "mds_shards")


def local_stages(keys) -> dict:
    names = {k.to_user_string() for k in keys}
    return {"ops": {name: {"config": {"executor": "local"}} for name in STAGES if name in names}}


def write_folder_source(data_root: Path, name: str, count: int, start: int = 0, spec_extra: str = "") -> Path:
    """An image_folder source of ``count`` photo-like JPEGs (exportable size) with captions."""
    folder = data_root / "inputs" / name
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        (folder / f"img{i:03d}.jpg").write_bytes(images.jpeg(512, 512, seed=1000 + i + 97 * len(name)))
        (folder / f"img{i:03d}.txt").write_text(f"A smooth colour field with soft noise, picture number {i} of {name}.")
    spec = data_root / "sources" / f"{name}.yaml"
    if not spec.exists():
        spec.write_text(f"name: {name}\nshape: image_folder\nlocation: {folder}\nlicense: cc0\n{spec_extra}")
    return folder


@pytest.fixture
def automation(prx_defs, instance) -> Automation:
    return Automation(prx_defs, instance)


def report_materialized(instance: dg.DagsterInstance, assets, partitions=(None,)) -> None:
    """Record materializations as a finished run would (conditions only read the event log)."""
    for partition in partitions:
        for asset in assets:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset, partition=partition))


def evaluate_sensor(defs: dg.Definitions, instance: dg.DagsterInstance, name: str, cursor: str | None):
    """One sensor tick, with its partition requests and asset events applied as the daemon would."""
    sensor = defs.resolve_sensor_def(name)
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={k: (defs.resources or {})[k] for k in ("registry", "storage")}, definitions=defs
    )
    result = sensor(context)
    if isinstance(result, dg.SensorResult):
        for request in result.dynamic_partitions_requests or []:
            if isinstance(request, dg.DeleteDynamicPartitionsRequest):
                for key in request.partition_keys:
                    instance.delete_dynamic_partition(request.partitions_def_name, key)
            else:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for event in result.asset_events or []:
            instance.report_runless_asset_event(event)
    return result


@pytest.fixture
def redeploy(monkeypatch):
    """Load the code location again with another captioner configured, as a restart with new
    settings would: the caption assets' code versions and pools are read when Definitions are
    built, so building them again is enough."""
    import json

    from prx_data.core.settings import get_settings
    from prx_data.defs.build import build_defs

    def load(captioner: dict) -> dg.Definitions:
        monkeypatch.setenv("PRX_CAPTIONER", json.dumps(captioner))
        get_settings.cache_clear()
        return build_defs()

    yield load
    monkeypatch.undo()
    get_settings.cache_clear()
