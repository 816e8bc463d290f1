"""The whole chain with its Ray tasks on two isolated nodes equals a single-process run.

Both runs read the same sources (WebDataset tars in a moto S3 bucket, read by each ingest task
itself) and write to moto S3 roots (Lance and MDS). The cluster run
ingests with 2 workers, hashes, captions and labels on Ray, and exports with 2 write workers
pinned to the isolated nodes (``task_resources``); the head offers no CPUs, so no task can run
beside the driver. A task that opened a path only the driver can see (its ``/tmp``, where
pytest's folders live) would fail this test (``test_isolation`` proves such a task fails).
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

import lance
import pytest
import yaml

from prx_data.core.paths import StoragePaths
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images
from prx_data_tests.cluster.multinode import TASK_RESOURCES, Cluster
from prx_data_tests.cluster.pipeline import outcome, run_chain

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


def test_pipeline_on_isolated_nodes_equals_one_process(cluster: Cluster, sources: Sources, s3_server, tmp_path) -> None:
    import ray

    options = s3_server.options()
    single = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    multi = StoragePaths(lance_root=f"s3://{s3_server.new_bucket()}/lance", mds_root=f"s3://{s3_server.new_bucket()}/mds")
    optout = sources.optout_dir
    source = _source(sources.location, tmp_path)

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
