"""The registry sensor, evaluated against a real Dagster instance."""

from __future__ import annotations

import dagster as dg

from prx_data.defs.ingest.sensors import source_registry_sensor
from prx_data.defs.partitions import sources_partitions


def _evaluate(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"registry": defs.resources["registry"]}, definitions=defs
    )
    result = source_registry_sensor(context)
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

    first = _evaluate(prx_defs, instance, None)
    assert isinstance(first, dg.SensorResult)
    assert sorted(r.partition_key for r in first.run_requests) == ["a", "b"]
    assert set(instance.get_dynamic_partitions(sources_partitions.name)) == {"a", "b"}

    # Nothing changed: no runs; the skip reason names the bad spec and its field.
    second = _evaluate(prx_defs, instance, first.cursor)
    assert isinstance(second, dg.SkipReason)
    assert "broken.yaml" in second.skip_message and "field 'shape'" in second.skip_message

    # A changed spec re-runs that partition only, under a new run key.
    (sources / "b.yaml").write_text("name: b\nshape: image_folder\nlocation: b\npriority: 5\n")
    third = _evaluate(prx_defs, instance, first.cursor)
    assert [r.partition_key for r in third.run_requests] == ["b"]
    assert third.run_requests[0].run_key != next(r.run_key for r in first.run_requests if r.partition_key == "b")
    assert not third.dynamic_partitions_requests

    # A spec that breaks after it was added: the others still proceed.
    (sources / "a.yaml").write_text("name: a\nshape: image_folder\n")
    (sources / "c.yaml").write_text("name: c\nshape: image_folder\nlocation: c\n")
    fourth = _evaluate(prx_defs, instance, third.cursor)
    assert [r.partition_key for r in fourth.run_requests] == ["c"]
    assert "a" in instance.get_dynamic_partitions(sources_partitions.name)


def test_sensor_run_request_targets_the_source_job(data_root, prx_defs, instance):
    (data_root / "sources" / "a.yaml").write_text("name: a\nshape: image_folder\nlocation: a\n")
    sensor = prx_defs.resolve_sensor_def("source_registry_sensor")
    assert sensor.job_name == "source_pipeline"
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
