"""The cluster fixture isolates what it must: a task never sees the driver's local folders."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from prx_data_tests.cluster.multinode import ISOLATED, Cluster


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _where() -> tuple[str, str]:
    import ray

    return ray.get_runtime_context().get_node_id(), socket.gethostname()


def test_a_task_cannot_open_a_driver_local_file(cluster: Cluster, tmp_path: Path) -> None:
    import ray

    secret = tmp_path / "driver-only.txt"
    secret.write_bytes(b"only the driver sees this")
    assert _read(str(secret)) == b"only the driver sees this"
    with pytest.raises(FileNotFoundError):
        try:
            ray.get(ray.remote(num_cpus=1, max_retries=0)(_read).remote(str(secret)))
        except ray.exceptions.RayTaskError as exc:
            raise exc.cause from None


def test_tasks_run_only_on_the_isolated_nodes(cluster: Cluster) -> None:
    import ray

    head = ray.get_runtime_context().get_node_id()  # the driver's node
    task = ray.remote(num_cpus=1, max_retries=0)(_where)
    nodes = {node for node, _ in ray.get([task.remote() for _ in range(8)])}
    assert head not in nodes
    isolated = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(ISOLATED)}
    assert nodes <= isolated and len(isolated) == 2
