from __future__ import annotations

import os

import pytest

# Nothing in these tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    from prx_data_tests.models.tiny_vlm import build_tiny_qwen3_vl

    return build_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny-qwen3-vl"))


@pytest.fixture(scope="module")
def ray_local():
    """Ray for the processor-building tests (building needs ray.init): the session's shared head
    when there is one. A second cluster started here would outlive the module and be inherited
    (RAY_ADDRESS) by later tests' subprocesses, which then run on a one-CPU Ray of the wrong
    environment."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started and os.environ.get("PRX_RAY_ADDRESS"):
        ray.init(address=os.environ["PRX_RAY_ADDRESS"], log_to_driver=False)
    elif started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
