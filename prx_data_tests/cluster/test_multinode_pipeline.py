"""The whole chain with its Ray tasks on two isolated nodes equals a single-process run, and
the cluster keeps what it isolates.

Both runs read the same sources (WebDataset tars in a moto S3 bucket, read by each ingest task
itself) and write to moto S3 roots (Lance and MDS). The cluster run is Dagster's own
``source_pipeline`` job with the settings a deployment sets: it ingests with 2 workers, hashes,
captions and labels on Ray, and exports with 2 write workers. The head offers a CPU too; only
PRX_RAY_TASK_RESOURCES (the custom resource the worker nodes offer and the head does not) keeps
every task off it, and the head's worker logs prove none ran there. A task that opened a path
only the driver can see (its ``/tmp``, where pytest's folders live) would fail this test
(``test_a_task_cannot_open_a_driver_local_file`` proves such a task fails).

The isolation checks share this module's cluster: one cluster start fewer than a module each.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import pytest
import yaml

from prx_data.core.paths import StoragePaths
from prx_data.core.ray_tasks import parse_task_resources, task_options
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images
from prx_data_tests.cluster.multinode import ISOLATED, TASK_RESOURCES_VAR, Cluster
from prx_data_tests.cluster.pipeline import outcome, run_chain, run_source_job

SOURCE = "shards"
# tar -> [(key, image seed, width, height, caption)]; k2 and k5 share an image (a dedup skip),
# t1-k1 is opted out by key before ingest.
LAYOUT = {
    "part-0.tar": [("t0-k0", 1, 640, 480, "a red barn"), ("t0-k1", 2, 480, 640, "a tall tower"), ("t0-k2", 3, 800, 600, "the sea")],
    "part-1.tar": [("t1-k0", 4, 640, 640, "a square"), ("t1-k1", 5, 640, 480, "opted out"), ("t1-k2", 6, 600, 800, "a door")],
    "part-2.tar": [("t2-k0", 7, 640, 480, "a field"), ("t2-k1", 3, 800, 600, "the sea again"), ("t2-k2", 8, 16, 16, "too small")],
}


def _write_tar(path: Path, rows) -> None:
    with tarfile.open(path, "w") as tar:
        for key, seed, width, height, caption in rows:
            for name, data in (
                (f"{key}.jpg", images.jpeg(width, height, seed=seed)),
                (f"{key}.json", json.dumps({"caption": caption}).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@dataclass
class Sources:
    location: str  # the tars' glob, on moto S3: every node reads them itself
    optout_dir: str  # read by the driver only


@pytest.fixture
def sources(s3_server, tmp_path) -> Sources:
    """The tars in a bucket of the same S3 service as the roots; the opt-out folder in the
    driver's own /tmp (only the driver reads requests)."""
    bucket = s3_server.new_bucket()
    client = s3_server.client()
    for tar, rows in LAYOUT.items():
        _write_tar(tmp_path / tar, rows)
        client.put_object(Bucket=bucket, Key=f"wds/{tar}", Body=(tmp_path / tar).read_bytes())
    optout = tmp_path / "optout"
    optout.mkdir()
    (optout / "req-1.yaml").write_text(yaml.safe_dump({"id": "req-1", "source_keys": [f"{SOURCE}:t1-k1"]}))
    return Sources(location=f"s3://{bucket}/wds/*.tar", optout_dir=str(optout))


def _source(location: str, spec_dir: Path) -> RegisteredSource:
    spec = SourceSpec(name=SOURCE, shape="webdataset", location=location, workers=2)
    return RegisteredSource(spec, spec_dir / f"{SOURCE}.yaml")


# The pipeline's Ray tasks (ingest units, column-stage chunks, export writers).
PIPELINE_TASKS = {"process_unit", "_run_chunk", "_write_part"}
# The pinning the tests ask for, read the way the settings read it.
PINNED = task_options(num_cpus=1, max_retries=0, resources=parse_task_resources(TASK_RESOURCES_VAR["PRX_RAY_TASK_RESOURCES"]))


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _where() -> tuple[str, str]:
    import ray

    return ray.get_runtime_context().get_node_id(), socket.gethostname()


def _on_head() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def test_a_task_cannot_open_a_driver_local_file(cluster: Cluster, tmp_path: Path) -> None:
    import ray

    secret = tmp_path / "driver-only.txt"
    secret.write_bytes(b"only the driver sees this")
    assert _read(str(secret)) == b"only the driver sees this"
    with pytest.raises(FileNotFoundError):
        try:
            ray.get(ray.remote(**PINNED)(_read).remote(str(secret)))
        except ray.exceptions.RayTaskError as exc:
            raise exc.cause from None


def test_the_setting_places_tasks_on_the_isolated_nodes_and_the_head_log_shows_any_that_ran_there(cluster: Cluster) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = ray.get_runtime_context().get_node_id()  # the driver's node, which offers a CPU
    assert ray.cluster_resources().get("CPU", 0) == 3
    nodes = {node for node, _ in ray.get([ray.remote(**PINNED)(_where).remote() for _ in range(8)])}
    isolated = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(ISOLATED)}
    assert head not in isolated and nodes <= isolated and len(isolated) == 2
    # The detector the pipeline test relies on: a task that did run on the head is named in
    # the head's logs (and a pinned one is not).
    strategy = NodeAffinitySchedulingStrategy(node_id=head, soft=False)
    pinned: Any = ray.remote(num_cpus=1, scheduling_strategy=strategy)  # type: ignore[call-overload]  # ray's overloads omit strategies
    assert ray.get(pinned(_on_head).remote()) == head
    deadline = time.monotonic() + 30
    while "_on_head" not in cluster.head_task_names() and time.monotonic() < deadline:
        time.sleep(0.2)
    names = cluster.head_task_names()
    assert "_on_head" in names and "_where" not in names


def test_pipeline_on_isolated_nodes_equals_one_process(
    cluster: Cluster, sources: Sources, s3_server, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = s3_server.options()
    single = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    multi = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    optout = sources.optout_dir
    source = _source(sources.location, tmp_path)
    specs = tmp_path / "sources"
    specs.mkdir()

    # A deployment's settings: the roots and credentials, the cluster's address, and the
    # resource only the worker nodes offer.
    env = {
        **s3_server.env(),
        **TASK_RESOURCES_VAR,
        "PRX_RAY_ADDRESS": cluster.address,
        "PRX_DATA_ROOT": str(tmp_path / "data"),
        "PRX_LANCE_ROOT": multi.lance_root,
        "PRX_MDS_ROOT": multi.mds_root,
        "PRX_SOURCES_DIR": str(specs),
        "PRX_OPTOUT_DIR": optout,
        "PRX_MIN_STREAM_SAMPLES": "1",
        "PRX_FOLD_SPARSE_BUCKETS": "0",
    }
    for name in [n for n in os.environ if n.startswith("PRX_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run_source_job(source, str(specs), multi, env, optout_dir=optout, write_workers=2)
    ran_on_head = cluster.head_task_names() & PIPELINE_TASKS
    assert not ran_on_head, f"pipeline tasks ran on the head: {ran_on_head}"
    run_chain(source, single, options, optout_dir=optout, executor="local", workers=1, write_workers=1)

    got, want = outcome(SOURCE, multi, options), outcome(SOURCE, single, options)
    assert got.rows == want.rows
    statuses = {r["source_key"]: r["status"] for r in want.rows}
    assert statuses["t1-k1"] == "opted_out" and len(want.rows) == 9
    assert got.exported == want.exported and len(want.exported) == 7  # opted out and too small are not exported
    assert got.placements == want.placements
    assert got.skips == want.skips and any(reason == "dedup" for _, reason in want.skips)
    assert got.merged == want.merged and sum(want.merged.values()) == 7
    # Two export tasks wrote the cluster's shards (one per node: each node has one CPU).
    shards = lance.dataset(multi.exports_table(SOURCE), storage_options=options).to_table()["shard"].to_pylist()
    assert {name.rsplit("/", 1)[1].split(".")[1] for name in shards if name} == {"p1", "p2"}
