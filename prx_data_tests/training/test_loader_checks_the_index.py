"""``make_loader`` refuses a bucket index or skip-list file that a bucket's writer planted:
basenames leaving the bucket (or, on an s3:// root, the cache the downloads land in), sample
counts a shard cannot hold, and oversized sidecars, each with the file named and before
anything is read outside the root or written outside the cache. Local and s3:// roots, on a
corpus written the way the pipeline writes it (``trainable.build_corpus``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from prx_data.core.storage import Location, locate, read_bytes, write_bytes
from prx_data.export._fs import dumps_stable, sha256_bytes
from prx_data.training.loader import make_loader
from prx_data_tests.export.trainable import build_corpus, loader_epoch, release

BUCKET = "512/512x512"  # published, with skips


@pytest.fixture
def corpus(storage_root, tmp_path: Path):
    root = storage_root.uri("mds")
    build_corpus(root, storage_root.options)
    release()
    return root, storage_root.options


def _edit_json(root: str, options, rel: str, edit) -> None:
    loc = locate(root, options).child(*rel.split("/"))
    obj = json.loads(read_bytes(loc))
    edit(obj)
    write_bytes(loc, json.dumps(obj).encode())


def _open(root: str, options, tmp_path: Path):
    return make_loader(root, batch_size=1, shuffle=False, cache_dir=str(tmp_path / "cache" / "c"), storage_options=options)


def test_the_pipelines_tree_still_loads(corpus, tmp_path: Path):
    root, options = corpus
    assert loader_epoch(_open(root, options, tmp_path))


@pytest.mark.parametrize(
    "basename",
    ["../../../../etc/passwd", "/etc/passwd", "alpha/../../../escape/shard.mds"],
    ids=["dotdot", "absolute", "cache-escape"],
)
def test_a_basename_leaving_the_bucket_is_refused(corpus, tmp_path: Path, basename: str):
    root, options = corpus

    def edit(index: dict) -> None:
        index["shards"][0]["raw_data"]["basename"] = basename

    _edit_json(root, options, f"{BUCKET}/index.json", edit)
    with pytest.raises(ValueError) as raised:
        _open(root, options, tmp_path)
    message = str(raised.value)
    assert f"{BUCKET}/index.json" in message and repr(basename) in message, message
    assert not (tmp_path / "escape").exists() and not (tmp_path / "cache" / "escape").exists()
    release()


def test_a_sample_count_the_shard_cannot_hold_is_refused_by_name(corpus, tmp_path: Path):
    root, options = corpus

    def edit(index: dict) -> None:
        index["shards"][0]["samples"] = 10**12

    _edit_json(root, options, f"{BUCKET}/index.json", edit)
    with pytest.raises(ValueError, match=r"samples is 1000000000000, more than a shard of \d+ bytes can hold") as raised:
        _open(root, options, tmp_path)
    assert f"{BUCKET}/index.json" in str(raised.value)
    release()


def _manifest(root: str, options) -> tuple[dict, Location]:
    loc = locate(root, options).child(*BUCKET.split("/"), "skiplists.json")
    return json.loads(read_bytes(loc)), loc


def test_an_oversized_sidecar_is_refused_before_it_is_parsed(corpus, tmp_path: Path):
    root, options = corpus
    manifest, manifest_loc = _manifest(root, options)
    entry = manifest["sidecars"][0]
    loc = locate(root, options).child(*BUCKET.split("/"), *entry["path"].split("/"))
    sidecar = json.loads(read_bytes(loc))
    many = 300_000  # far more indices than the shard has samples
    sidecar["indices"] = list(range(many))
    sidecar["sample_ids"] = ["0" * 32] * many
    data = dumps_stable(sidecar)
    write_bytes(loc, data)
    entry["sha256"] = sha256_bytes(data)
    write_bytes(manifest_loc, dumps_stable(manifest))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="refusing to parse it") as raised:
        _open(root, options, tmp_path)
    assert entry["path"].split("/")[-1] in str(raised.value)
    assert time.perf_counter() - started < 30
    release()


@pytest.mark.parametrize("path", ["../../../escape/x.mds.skip.a.json", "/etc/passwd"])
def test_a_manifest_naming_a_sidecar_outside_the_bucket_is_refused(corpus, tmp_path: Path, path: str):
    root, options = corpus
    manifest, manifest_loc = _manifest(root, options)
    manifest["sidecars"][0]["path"] = path
    write_bytes(manifest_loc, dumps_stable(manifest))
    with pytest.raises(ValueError) as raised:
        _open(root, options, tmp_path)
    assert "skiplists.json" in str(raised.value) and repr(path) in str(raised.value), str(raised.value)
    assert not (tmp_path / "escape").exists() and not (tmp_path / "cache" / "escape").exists()
    release()


def test_a_shard_list_that_disagrees_with_its_sources_is_refused(corpus, tmp_path: Path):
    root, options = corpus

    def edit(index: dict) -> None:
        index["shards"].append(dict(index["shards"][0]))  # one shard listed twice: more samples than the sources hold

    _edit_json(root, options, f"{BUCKET}/index.json", edit)
    with pytest.raises(ValueError, match="samples in the shard list, the index records") as raised:
        _open(root, options, tmp_path)
    assert f"{BUCKET}/index.json" in str(raised.value)
    release()
