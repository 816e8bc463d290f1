"""A worker node lost in the middle of an export (its whole process tree killed): the run fails,
the last published export is untouched, and the next run publishes normally.

Its own module, so its own cluster: the node it kills does not come back."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.storage import glob_files, list_dir, locate
from prx_data.export.commit import COMMITS_DIR
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images
from prx_data_tests.cluster.multinode import TASK_RESOURCES, Cluster
from prx_data_tests.export.test_mds_writer import _published
from prx_data_tests.storage_parity import StorageRoot

SOURCE = "photos"


def _tar(path: Path, keys: range) -> None:
    with tarfile.open(path, "w") as tar:
        for k in keys:
            for name, data in (
                (f"k{k}.jpg", images.jpeg(1600, 1200, seed=k)),
                (f"k{k}.json", json.dumps({"caption": f"photo {k}"}).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@dataclass
class Bucket:
    """The source's tars in moto S3 (every node reads them itself); tmp_path is the driver's."""

    client: Any  # a boto3 S3 client
    name: str
    scratch: Path

    def put_tar(self, name: str, keys: range) -> None:
        _tar(self.scratch / name, keys)
        self.client.put_object(Bucket=self.name, Key=f"wds/{name}", Body=(self.scratch / name).read_bytes())


@pytest.fixture
def source_bucket(s3_server, tmp_path) -> Bucket:
    return Bucket(s3_server.client(), s3_server.new_bucket(), tmp_path)


def _prepare(bucket: Bucket, paths: StoragePaths, options: dict) -> None:
    from prx_data.ingest.driver import ingest_source
    from prx_data.stages.caption_stage import compute_captions

    source = RegisteredSource(
        SourceSpec(name=SOURCE, shape="webdataset", location=f"s3://{bucket.name}/wds/*.tar"), bucket.scratch / "s.yaml"
    )
    ingest_source(source, paths.raw_table(SOURCE), storage_options=options, workers=1)
    compute_captions(paths.raw_table(SOURCE), {"backend": "source"}, executor="local", storage_options=options)


def _run_of(rel: str) -> str:
    return rel.rsplit("/", 1)[1].split(".")[0]


def _export(paths: StoragePaths, options: dict):
    from prx_data.export.mds_writer import MdsWriterConfig
    from prx_data.stages.export_stage import export_source

    return export_source(
        paths.raw_table(SOURCE),
        SOURCE,
        mds_root=paths.mds_root,
        exports_uri=paths.exports_table(SOURCE),
        executor="ray",
        storage_options=options,
        write_workers=2,
        task_resources=TASK_RESOURCES,
        chunk_rows=4,
        writer_cfg=MdsWriterConfig(size_limit=150_000),  # a shard every few images: visible progress
    )


def test_node_lost_mid_export_fails_the_run_and_damages_nothing(cluster: Cluster, source_bucket: Bucket, s3_server) -> None:
    options = s3_server.options()
    bucket = s3_server.new_bucket()
    paths = StoragePaths(lance_root=f"s3://{bucket}/lance", mds_root=f"s3://{bucket}/mds")
    mds = StorageRoot("s3", paths.mds_root, options, s3_server)
    source_bucket.put_tar("part-0.tar", range(4))
    _prepare(source_bucket, paths, options)
    assert _export(paths, options).exported == 4
    published = _published(mds)
    first_run = {_run_of(rel) for rel in published if ".shard." in rel}

    # Enough new images that the export runs for seconds on a quiet machine: the node is lost
    # while its task writes, not after the run has finished.
    source_bucket.put_tar("part-1.tar", range(4, 164))
    _prepare(source_bucket, paths, options)
    root = locate(paths.mds_root, options)
    commits = root.child(COMMITS_DIR)
    killed = threading.Event()

    def kill_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(e.name.endswith(".running") for e in list_dir(commits)) and any(
                ".shard." in rel and _run_of(rel) not in first_run for rel in glob_files(root, "*.mds", recursive=True)
            ):
                cluster.kill_worker(0)  # tasks are writing shards: lose a node now
                killed.set()
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_running, daemon=True)
    killer.start()
    with pytest.raises(Exception) as failure:
        _export(paths, options)
    killer.join()
    assert killed.is_set(), f"the export finished before a node could be lost: {failure.value!r}"
    assert _published(mds) == published  # readers see the last published export, whole

    leftovers = [rel for rel in mds.files() if ".shard." in rel and _run_of(rel) not in first_run]
    assert leftovers == [], "the failed run deletes what its tasks wrote"

    stats = _export(paths, options)  # the surviving node does the work
    assert stats.exported == 164 and stats.encoded == 160
    assert not list_dir(commits)
    assert sum(1 for rel in _published(mds) if rel.endswith("/index.json")) >= 1
