"""``export.stream_check.read_bucket``, the blocking ``bucket_streams_readable`` check: a bucket's
merged index and its first and last samples, read with the project's MDS reader (no streaming
import), on a local folder and on moto S3; and the same count and samples as StreamingDataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from prx_data.core.storage import delete_file, locate, read_bytes, write_bytes
from prx_data.export import stream_check
from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import write_partition
from prx_data.export.stream_check import read_bucket, read_edge_samples
from prx_data.export.tree import BucketRef
from prx_data_tests.export.conftest import SMALL, make_samples
from prx_data_tests.storage_parity import StorageRoot

ONE_BUCKET = [(512, 512, 512)]
SOURCES = {"alpha": 23, "beta": 17}
REPO = Path(__file__).resolve().parents[2]


def _build(mds_root: str, options: dict | None) -> str:
    """Two sources in one bucket, several shards each (SMALL's 12 kB limit); the bucket's folder."""
    for k, (source, n) in enumerate(sorted(SOURCES.items())):
        write_partition(
            make_samples(source, n, seed=k + 1, buckets=ONE_BUCKET), mds_root=mds_root, source=source, storage_options=options, config=SMALL
        )
    merge_all(mds_root, options)
    return BucketRef(*ONE_BUCKET[0]).dir(mds_root)


@pytest.fixture
def bucket(storage_root: StorageRoot) -> tuple[str, dict | None]:
    return _build(storage_root.uri("mds"), storage_root.options), storage_root.options


def _index(bucket_dir: str, options: dict | None) -> dict:
    return json.loads(read_bytes(locate(bucket_dir, options).child("index.json")))


def _edit_index(bucket_dir: str, options: dict | None, edit: Callable[[dict], None]) -> None:
    index = _index(bucket_dir, options)
    edit(index)
    write_bytes(locate(bucket_dir, options).child("index.json"), json.dumps(index).encode())


def test_a_good_bucket_returns_its_count_and_fetches_two_shards_at_most(bucket, monkeypatch) -> None:
    bucket_dir, options = bucket
    index = _index(bucket_dir, options)
    assert len(index["shards"]) > 3  # several shards per source: the check must pick the edges
    assert read_bucket(bucket_dir, options) == sum(SOURCES.values())
    fetched: list[str] = []
    fetch = stream_check.fetch_local

    def recording(loc, scratch):
        fetched.append(loc.uri)
        return fetch(loc, scratch)

    monkeypatch.setattr(stream_check, "fetch_local", recording)
    count, first, last = read_edge_samples(bucket_dir, options)
    assert count == sum(SOURCES.values())
    assert (first["sample_id"], last["sample_id"]) == ("alpha-00000", "beta-00016")
    shards = [info["raw_data"]["basename"] for info in index["shards"]]
    assert fetched == [f"{bucket_dir}/{shards[0]}", f"{bucket_dir}/{shards[-1]}"]


def _truncate_last_shard(bucket_dir: str, options: dict | None) -> str:
    basename = _index(bucket_dir, options)["shards"][-1]["raw_data"]["basename"]
    loc = locate(bucket_dir, options).child(basename)
    write_bytes(loc, read_bytes(loc)[:-10])
    return basename


def _delete_first_shard(bucket_dir: str, options: dict | None) -> str:
    basename = _index(bucket_dir, options)["shards"][0]["raw_data"]["basename"]
    delete_file(locate(bucket_dir, options).child(basename))
    return basename


def _zero_samples(bucket_dir: str, options: dict | None) -> str:
    def edit(index: dict) -> None:
        for info in index["shards"]:
            info["samples"] = 0

    _edit_index(bucket_dir, options, edit)
    return "no samples"


def _drop_sample_id(bucket_dir: str, options: dict | None) -> str:
    def edit(index: dict) -> None:
        info = index["shards"][2]
        at = info["column_names"].index("sample_id")
        for key in ("column_names", "column_encodings", "column_sizes"):
            del info[key][at]

    _edit_index(bucket_dir, options, edit)
    return "lacks column(s) ['sample_id']"


def _escape_bucket(bucket_dir: str, options: dict | None) -> str:
    def edit(index: dict) -> None:
        index["shards"][1]["raw_data"]["basename"] = "../768x1360/alpha/shard.00000.mds"

    _edit_index(bucket_dir, options, edit)
    return "../768x1360/alpha/shard.00000.mds"


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (_truncate_last_shard, "truncated or replaced"),
        (_delete_first_shard, "does not exist"),
        (_zero_samples, None),
        (_drop_sample_id, None),
        (_escape_bucket, "inside the bucket folder"),
    ],
    ids=["truncated-shard", "missing-shard", "zero-samples", "no-sample_id", "dotdot-basename"],
)
def test_a_broken_bucket_raises_with_the_bucket_and_the_reason(bucket, damage, says) -> None:
    bucket_dir, options = bucket
    detail = damage(bucket_dir, options)
    with pytest.raises(ValueError) as raised:
        read_bucket(bucket_dir, options)
    message = str(raised.value)
    assert f"bucket {bucket_dir}" in message, message
    assert detail in message, message
    if says:
        assert says in message, message


def test_no_index_or_a_bad_one_is_named(tmp_path) -> None:
    bucket_dir = _build(str(tmp_path / "mds"), None)
    index = Path(bucket_dir) / "index.json"
    good = json.loads(index.read_text())
    for obj, says in [
        ({**good, "version": 1}, "version 1"),
        ({**good, "shards": []}, "lists no shards"),
        (
            {**good, "shards": [{**good["shards"][0], "raw_data": {**good["shards"][0]["raw_data"], "basename": "/etc/passwd"}}]},
            "/etc/passwd",
        ),
        ({**good, "shards": [{**good["shards"][0], "format": "json"}]}, "format 'json'"),
    ]:
        index.write_text(json.dumps(obj))
        with pytest.raises(ValueError, match="index.json") as raised:
            read_bucket(bucket_dir)
        assert says in str(raised.value)
    index.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_bucket(bucket_dir)
    index.unlink()
    with pytest.raises(ValueError, match="does not exist"):
        read_bucket(bucket_dir)


def test_the_check_imports_neither_streaming_nor_torch(tmp_path) -> None:
    bucket_dir = _build(str(tmp_path / "mds"), None)
    code = (
        "import json, sys\n"
        "from prx_data.export.stream_check import read_bucket\n"
        f"n = read_bucket({bucket_dir!r})\n"
        "print(json.dumps([n, sorted(m for m in ('streaming', 'torch', 'transformers') if m in sys.modules)]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [sum(SOURCES.values()), []]


def test_count_and_edge_samples_are_what_streaming_reads(tmp_path) -> None:
    from streaming import StreamingDataset

    bucket_dir = _build(str(tmp_path / "mds"), None)
    count, first, last = read_edge_samples(bucket_dir)
    ds = StreamingDataset(local=bucket_dir, shuffle=False, batch_size=1)
    try:
        assert ds.num_samples == count
        for ours, theirs in ((first, ds[0]), (last, ds[count - 1])):
            assert set(ours) == set(theirs)
            assert all(ours[key] == theirs[key] for key in ours), (ours["sample_id"], theirs["sample_id"])
    finally:
        del ds
