"""Sources that leave cleanly and files that say what is wrong with them.

- A removed spec: the registry sensor launches ``retire_source``, which takes the source's shards
  out of the training tree (kept under ``_retired/``, with a receipt on the data card), rebuilds
  the merged indexes without them and removes the partition; re-adding the spec brings the
  source back whole.
- A bad spec or opt-out request: the tick is skipped with the file and reason, and the
  ``source_registry`` check turns red with a table of every bad file; fixing them turns it green.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.core.storage import exists, glob_files, is_file, join, locate, read_bytes, write_bytes
from prx_data.curation.retire import archive_source, receipts
from prx_data.defs.ingest.registry_status import CHECK_NAME, SOURCE_REGISTRY
from prx_data.defs.partitions import SOURCES_PARTITION
from prx_data.export.tree import RETIRED_DIR, list_buckets, list_sources
from prx_data_tests.automation.conftest import PER_SOURCE, Automation, evaluate_sensor, local_stages, write_folder_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SENSOR = "source_registry_sensor"


def _sources_in_tree(mds_root: str) -> set[str]:
    return {s for ref in list_buckets(mds_root) for s in list_sources(ref.dir(mds_root))}


def _published_shards(mds_root: str) -> set[str]:
    names = set()
    for ref in list_buckets(mds_root):
        index = locate(join(ref.dir(mds_root), "index.json"))
        if is_file(index):
            names |= {s["raw_data"]["basename"] for s in json.loads(read_bytes(index))["shards"]}
    return names


def test_removing_a_spec_retires_its_partition_and_re_adding_brings_it_back(data_root, prx_defs, instance, monkeypatch):
    monkeypatch.setenv("PRX_MIN_STREAM_SAMPLES", "1")
    get_settings.cache_clear()
    automation = Automation(prx_defs, instance)
    automation.tick()  # the baseline tick: new partitions are then "newly missing"
    write_folder_source(data_root, "keep", 3)
    write_folder_source(data_root, "gone", 3, spec_extra="priority: 1\n")
    first = evaluate_sensor(prx_defs, instance, SENSOR, None)
    automation.settle()
    assert all(r.success for r in automation.runs)
    mds_root = get_settings().mds_root
    assert _sources_in_tree(mds_root) == {"keep", "gone"}
    assert any(b.startswith("gone/") for b in _published_shards(mds_root))

    spec = data_root / "sources" / "gone.yaml"
    spec_text = spec.read_text()
    spec.unlink()
    tick = evaluate_sensor(prx_defs, instance, SENSOR, first.cursor)
    (request,) = tick.run_requests
    assert request.job_name == "retire_source" and request.tags["prx/retire"] == "gone"
    retired = prx_defs.resolve_job_def("retire_source").execute_in_process(
        instance=instance, run_config=request.run_config, tags=request.tags
    )
    assert retired.success

    # Out of the partition set and of training; the data is kept, with a receipt.
    assert instance.get_dynamic_partitions(SOURCES_PARTITION) == ["keep"]
    assert _sources_in_tree(mds_root) == {"keep"}
    assert not any(b.startswith("gone/") for b in _published_shards(mds_root))
    (receipt,) = receipts(mds_root)
    assert receipt.source == "gone" and receipt.samples_moved == 3
    paths = StoragePaths.from_settings(get_settings())
    assert exists(locate(paths.raw_table("gone"))) and not exists(locate(paths.exports_table("gone")))
    assert all(exists(locate(dst)) for dst in receipt.moved.values())
    # The sensor does not ask again; automation refreshes the skip lists and the data card.
    again = evaluate_sensor(prx_defs, instance, SENSOR, tick.cursor)
    assert isinstance(again, dg.SkipReason) or not again.run_requests
    history = automation.settle()
    assert {"skip_lists", "corpus_report"} <= set(history[0])
    card = automation.runs[-1].asset_materializations_for_node("corpus_report")[0]
    assert "## Retired sources" in card.metadata["data_card"].value and "| gone |" in card.metadata["data_card"].value

    # Re-added: the partition comes back and its whole chain runs; the export starts afresh.
    spec.write_text(spec_text)
    back = evaluate_sensor(prx_defs, instance, SENSOR, tick.cursor)
    assert "gone" in instance.get_dynamic_partitions(SOURCES_PARTITION)
    (readd,) = back.run_requests
    assert readd.partition_key == "gone" and readd.job_name == "source_pipeline" and readd.asset_selection is None
    run = prx_defs.resolve_job_def("source_pipeline").execute_in_process(
        instance=instance, partition_key="gone", tags=readd.tags, run_config=local_stages({dg.AssetKey(a) for a in PER_SOURCE})
    )
    assert run.success
    automation.settle()
    assert _sources_in_tree(mds_root) == {"keep", "gone"}
    assert any(b.startswith("gone/") for b in _published_shards(mds_root))


def test_a_broken_spec_is_not_a_removal(data_root, prx_defs, instance):
    write_folder_source(data_root, "a", 1)
    first = evaluate_sensor(prx_defs, instance, SENSOR, None)
    (data_root / "sources" / "a.yaml").write_text("name: a\nshape: nope\n")
    tick = evaluate_sensor(prx_defs, instance, SENSOR, first.cursor)
    assert isinstance(tick, dg.SensorResult) and not tick.run_requests
    assert instance.get_dynamic_partitions(SOURCES_PARTITION) == ["a"]


def test_a_partition_typed_in_the_ui_without_a_spec_is_dropped_without_a_retirement(data_root, prx_defs, instance):
    """The UI's "Add partition" cannot be hidden: a typo's partition has no spec and no data, so
    the next tick deletes it (no retire run, no receipt); a source that ingested is retired."""
    write_folder_source(data_root, "a", 1)
    first = evaluate_sensor(prx_defs, instance, SENSOR, None)
    instance.add_dynamic_partitions(SOURCES_PARTITION, ["aa"])
    tick = evaluate_sensor(prx_defs, instance, SENSOR, first.cursor)
    assert isinstance(tick, dg.SensorResult) and not tick.run_requests
    assert instance.get_dynamic_partitions(SOURCES_PARTITION) == ["a"]
    assert not receipts(get_settings().mds_root)


def test_bad_specs_and_requests_are_listed_by_the_check_and_skip_the_tick(data_root, prx_defs, instance):
    write_folder_source(data_root, "good", 1)
    (data_root / "sources" / "typo.yaml").write_text("name: typo\nshape: image_foldr\nlocation: x\n")
    (data_root / "optout" / "req.yaml").write_text("id: r1\nreason: takedown\n")  # names nothing to remove
    first = evaluate_sensor(prx_defs, instance, SENSOR, None)
    (evaluation,) = [e for e in first.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert evaluation.asset_key == SOURCE_REGISTRY and evaluation.check_name == CHECK_NAME and not evaluation.passed
    problems = evaluation.metadata["problems"]
    assert isinstance(problems, dg.TableMetadataValue)
    rows = [r.data for r in problems.records]
    assert {(r["kind"], str(r["file"]).rsplit("/", 1)[-1]) for r in rows} == {("source spec", "typo.yaml"), ("opt-out request", "req.yaml")}
    assert any("shape" in str(r["message"]) for r in rows) and all(r["message"] for r in rows)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([dg.AssetCheckKey(SOURCE_REGISTRY, CHECK_NAME)])
    assert record[dg.AssetCheckKey(SOURCE_REGISTRY, CHECK_NAME)].status.value == "FAILED"

    # Nothing new: the tick is skipped with the files and reasons, and the check is not re-reported.
    second = evaluate_sensor(prx_defs, instance, SENSOR, first.cursor)
    message = second.skip_message if isinstance(second, dg.SkipReason) else second.skip_reason.skip_message
    assert message and "typo.yaml" in message and "req.yaml" in message and "field 'shape'" in message

    # Fixed: the check turns green on the next tick.
    (data_root / "sources" / "typo.yaml").unlink()
    (data_root / "optout" / "req.yaml").unlink()
    third = evaluate_sensor(prx_defs, instance, SENSOR, first.cursor)
    (green,) = [e for e in third.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert green.passed


def test_the_check_runs_from_the_ui_too(data_root, prx_defs, instance):
    (data_root / "sources" / "typo.yaml").write_text("name: typo\nshape: image_foldr\nlocation: x\n")
    job = prx_defs.resolve_implicit_global_asset_job_def()
    result = job.get_subset(
        asset_check_selection={dg.AssetCheckKey(SOURCE_REGISTRY, CHECK_NAME)}, asset_selection=set()
    ).execute_in_process(instance=instance, raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    assert not evaluation.passed and "typo.yaml" in evaluation.description


def test_archive_moves_the_export_on_both_roots(storage_root):
    """The move is a rename locally, copy-then-delete on S3; either way nothing is lost."""
    paths = StoragePaths(lance_root=storage_root.uri("lance"), mds_root=storage_root.uri("mds"))
    index = json.dumps({"version": 2, "shards": [{"samples": 5, "raw_data": {"basename": "shard.00000.mds"}}]}).encode()
    for bucket in ("1024/1024x1024", "512/512x512"):
        write_bytes(locate(join(paths.mds_root, bucket, "gone", "index.json"), storage_root.options), index)
        write_bytes(locate(join(paths.mds_root, bucket, "gone", "shard.00000.mds"), storage_root.options), b"x" * 10)
        write_bytes(locate(join(paths.mds_root, bucket, "keep", "index.json"), storage_root.options), index)
    write_bytes(locate(join(paths.exports_table("gone"), "data", "f.lance"), storage_root.options), b"rows")
    write_bytes(locate(join(paths.raw_table("gone"), "data", "f.lance"), storage_root.options), b"rows")

    receipt = archive_source(paths, "gone", reason="test", options=storage_root.options)

    assert receipt.samples_moved == 10 and len(receipt.moved) == 3
    files = storage_root.files("mds")
    assert not any("/gone/" in f and not f.startswith(RETIRED_DIR) for f in files)
    assert sum(f.startswith(f"{RETIRED_DIR}/gone/") and f.endswith("shard.00000.mds") for f in files) == 2
    assert {f for f in files if "/keep/" in f} == {"1024/1024x1024/keep/index.json", "512/512x512/keep/index.json"}
    assert glob_files(locate(paths.raw_table("gone"), storage_root.options), "*", recursive=True) == ["data/f.lance"]
    assert not exists(locate(paths.exports_table("gone"), storage_root.options))
    assert [r.source for r in receipts(paths.mds_root, storage_root.options)] == ["gone"]


def test_sources_remove_retires_from_the_terminal(data_root, tmp_path, monkeypatch, capsys):
    import dagster as dg

    from prx_data.app.cli import main

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    write_folder_source(data_root, "a", 1)
    write_folder_source(data_root, "b", 1)
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(SOURCES_PARTITION, ["a", "b"])
    assert main(["sources", "remove", "a", "--root", str(data_root)]) == 0, capsys.readouterr().out
    assert not (data_root / "sources" / "a.yaml").exists() and list((data_root / "sources" / ".removed").glob("a.*.yaml"))
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions(SOURCES_PARTITION) == ["b"]
        (run,) = instance.get_runs(dg.RunsFilter(job_name="retire_source"))
        assert run.tags["prx/launched_by"] == "cli"
        assert run.remote_job_origin is not None
        assert run.remote_job_origin.location_name == "prx_data"  # a run of the UI's location
    assert [r.source for r in receipts(get_settings().mds_root)] == ["a"]
    assert main(["sources", "remove", "nope", "--root", str(data_root)]) == 2


def test_the_code_location_loads(prx_defs):
    """What the UI's code server does with the Definitions: an op named like its job (the first
    retire_source) passed build_defs() but made the whole location fail to load."""
    dg.Definitions.validate_loadable(prx_defs)
    assert prx_defs.get_repository_def().get_job("retire_source").name == "retire_source"
