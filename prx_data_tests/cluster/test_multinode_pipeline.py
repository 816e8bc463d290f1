"""The whole chain with its Ray tasks on two isolated nodes equals a single-process run.

Both runs read the same sources and write to moto S3 roots (Lance and MDS). The cluster run
ingests with 2 workers, hashes, captions and labels on Ray, and exports with 2 write workers
pinned to the isolated nodes (``task_resources``); the head offers no CPUs, so no task can run
beside the driver. A task that opened a path only the driver can see (its ``/tmp``, where
pytest's folders live) would fail this test (``test_isolation`` proves such a task fails).
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import uuid
from pathlib import Path

import lance
import pytest
import yaml

from prx_data.core.paths import StoragePaths
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images
from prx_data_tests.cluster.multinode import TASK_RESOURCES, Cluster
from prx_data_tests.cluster.pipeline import outcome, run_chain

REPO = Path(__file__).resolve().parents[2]
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
            for name, data in ((f"{key}.jpg", images.jpeg(width, height, seed=seed)), (f"{key}.json", json.dumps({"caption": caption}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture(params=["shared-folder"])
def source_location(request) -> Path:
    """Where the sources live: a folder every node sees, outside the driver's /tmp.

    TODO(after merge): s3 source — add an "s3" param that uploads the tars to moto and returns
    its s3:// prefix, once sources are readable from object storage.
    """
    folder = REPO / "build" / "multinode-sources" / uuid.uuid4().hex[:12]
    (folder / "wds").mkdir(parents=True)
    (folder / "optout").mkdir()
    for tar, rows in LAYOUT.items():
        _write_tar(folder / "wds" / tar, rows)
    (folder / "optout" / "req-1.yaml").write_text(yaml.safe_dump({"id": "req-1", "source_keys": [f"{SOURCE}:t1-k1"]}))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _source(folder: Path) -> RegisteredSource:
    spec = SourceSpec(name=SOURCE, shape="webdataset", location=str(folder / "wds" / "*.tar"), workers=2)
    return RegisteredSource(spec, folder / f"{SOURCE}.yaml")


def test_pipeline_on_isolated_nodes_equals_one_process(cluster: Cluster, source_location: Path, s3_server) -> None:
    import ray

    options = s3_server.options()
    single = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    multi = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    optout = str(source_location / "optout")
    source = _source(source_location)

    run_chain(source, multi, options, optout_dir=optout, executor="ray", workers=2, write_workers=2, task_resources=TASK_RESOURCES)
    assert ray.is_initialized(), "the chain ran on the cluster's driver connection"
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
