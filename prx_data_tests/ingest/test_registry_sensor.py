"""The registry sensor, evaluated against a real Dagster instance."""

from __future__ import annotations

import json

import dagster as dg

from prx_data.defs.partitions import SOURCES_PARTITION

RAW = dg.AssetKey("raw_samples")


def _evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={k: (defs.resources or {})[k] for k in ("registry", "storage")}, definitions=defs
    )
    result = defs.resolve_sensor_def("source_registry_sensor")(context)
    # Apply the partition requests as the daemon would.
    if isinstance(result, dg.SensorResult):
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def test_new_changed_and_bad_specs(data_root, prx_defs, instance):
    sources = data_root / "sources"
    (sources / "a.yaml").write_text("name: a\nshape: image_folder\nlocation: a\n")
    (sources / "b.yaml").write_text("name: b\nshape: image_folder\nlocation: b\n")
    (sources / "broken.yaml").write_text("name: broken\nshape: nope\nlocation: x\n")

    # New specs become partitions and nothing else: automation requests a new partition's chain
    # (prx_data_tests/automation), so a run here would run it twice.
    first = _evaluate(prx_defs, instance, None)
    assert isinstance(first, dg.SensorResult)
    assert first.run_requests == []
    assert set(instance.get_dynamic_partitions(SOURCES_PARTITION)) == {"a", "b"}

    # Nothing changed: no runs; the skip reason names the bad spec and its field.
    second = _evaluate(prx_defs, instance, first.cursor)
    assert isinstance(second, dg.SkipReason)
    assert second.skip_message and "broken.yaml" in second.skip_message and "field 'shape'" in second.skip_message

    # A changed spec re-ingests that partition only; automation takes it from raw_samples.
    (sources / "b.yaml").write_text("name: b\nshape: image_folder\nlocation: b\npriority: 5\n")
    third = _evaluate(prx_defs, instance, first.cursor)
    (request,) = third.run_requests
    assert request.partition_key == "b" and request.asset_selection == [RAW]
    assert third.cursor and first.cursor
    assert request.run_key == f"b:{json.loads(third.cursor)['seen']['b']}" != f"b:{json.loads(first.cursor)['seen']['b']}"
    assert not third.dynamic_partitions_requests

    # A spec that breaks after it was added: its partition (and tables) stay, nothing is
    # requested for it, and a new source still proceeds.
    (sources / "a.yaml").write_text("name: a\nshape: image_folder\n")
    (sources / "c.yaml").write_text("name: c\nshape: image_folder\nlocation: c\n")
    fourth = _evaluate(prx_defs, instance, third.cursor)
    assert fourth.run_requests == []
    assert set(instance.get_dynamic_partitions(SOURCES_PARTITION)) == {"a", "b", "c"}
    fifth = _evaluate(prx_defs, instance, fourth.cursor)
    assert isinstance(fifth, dg.SkipReason) and fifth.skip_message and "a.yaml" in fifth.skip_message


def test_known_partition_the_cursor_never_saw_is_reingested(data_root, prx_defs, instance):
    """A partition added outside the sensor (the CLI) or a reset cursor: the sensor cannot know
    whether its table matches the spec, and re-ingest is incremental, so it asks for raw_samples."""
    (data_root / "sources" / "a.yaml").write_text("name: a\nshape: image_folder\nlocation: a\n")
    instance.add_dynamic_partitions(SOURCES_PARTITION, ["a"])
    result = _evaluate(prx_defs, instance, None)
    assert [(r.partition_key, r.asset_selection) for r in result.run_requests] == [("a", [RAW])]


def test_sensor_run_request_targets_the_source_job(data_root, prx_defs, instance):
    (data_root / "sources" / "a.yaml").write_text("name: a\nshape: image_folder\nlocation: a\n")
    sensor = prx_defs.resolve_sensor_def("source_registry_sensor")
    assert sorted(job.name for job in sensor.jobs) == ["retire_source", "source_pipeline"]
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
