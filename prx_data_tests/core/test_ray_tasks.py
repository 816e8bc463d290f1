"""Task resource settings: what a bad value says, and that a valid one reaches Ray's options."""

from __future__ import annotations

import pytest

from prx_data.core.ray_tasks import parse_task_resources, task_options


def test_resources_reach_the_options_and_bad_ones_are_refused() -> None:
    assert task_options(num_cpus=1, max_retries=0) == {"num_cpus": 1, "max_retries": 0}
    assert task_options(num_cpus=1, max_retries=0, resources={"pool": 0.01})["resources"] == {"pool": 0.01}
    assert parse_task_resources('{"prx_isolated": 0.01}') == {"prx_isolated": 0.01}
    assert parse_task_resources("") is None and parse_task_resources(None) is None
    with pytest.raises(ValueError, match="positive"):
        parse_task_resources('{"pool": 0}')
    with pytest.raises(ValueError, match="JSON object"):
        parse_task_resources('["pool"]')
    with pytest.raises(ValueError):
        parse_task_resources("{pool: 1")  # not JSON


def test_the_setting_reaches_the_dagster_resource_and_bad_values_are_refused_by_name() -> None:
    from prx_data.core.settings import load_settings
    from prx_data.defs.resource_set import build_resources
    from prx_data.defs.resources import RayTasksResource

    env = {"PRX_DATA_ROOT": "/nonexistent/prx", "PRX_RAY_TASK_RESOURCES": '{"cpu_pool": 0.01}'}
    configured, default = (
        build_resources(load_settings(env))["ray_tasks"],
        build_resources(load_settings({"PRX_DATA_ROOT": "/nonexistent/prx"}))["ray_tasks"],
    )
    assert isinstance(configured, RayTasksResource) and isinstance(default, RayTasksResource)
    assert configured.resources == {"cpu_pool": 0.01}
    assert default.resources is None
    for bad in ('{"cpu_pool": 0}', '["cpu_pool"]', '{"cpu_pool": "x"}'):
        with pytest.raises(ValueError, match="PRX_RAY_TASK_RESOURCES"):
            load_settings({**env, "PRX_RAY_TASK_RESOURCES": bad})
