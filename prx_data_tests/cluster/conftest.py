"""Fixtures of the multi-node tests: the isolated cluster, a driver connected to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from prx_data_tests.cluster.multinode import Cluster, start_cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def shared_ray_head():
    """These tests bring their own cluster; the session's single-node head is not started."""
    yield None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A head with one CPU and no custom resource, plus two isolated one-CPU worker nodes that
    offer ``ISOLATED``; a driver connected to it."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    logs = tmp_path_factory.mktemp("cluster-logs")
    # The tasks import the code under test from the repository (visible to every node).
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env[name] = "1"
    started = start_cluster(n_workers=2, cpus_per_worker=1, env=env, log_dir=str(logs))
    try:
        started.connect_and_wait()
        yield started
    finally:
        ray.shutdown()
        started.stop()
