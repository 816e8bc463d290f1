"""Every source shape read from an s3:// prefix (moto server) equals the same tree read from a
local folder: same sample ids, image hashes, statuses and captions, on the first run and on a
re-run after objects were added, edited and removed; image folders and WebDataset shards are
read by two Ray workers on the S3 side.

The trees carry hostile rows too (a path column escaping the root, a missing file, an image over
the byte cap, a bad image), so containment and caps are compared, not only the happy path.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prx_data.ingest.driver import EmptySource, ingest_source
from prx_data.ingest.read.raw_item import SourceUnavailable
from prx_data.ingest.read.whole_source import read_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec, load_spec
from prx_data_tests import images
from prx_data_tests.http_fixtures import LOCAL_NETWORKS
from prx_data_tests.ingest.test_parallel_ingest import shards

COLUMNS = ["sample_id", "source_key", "image_sha256", "status", "source_caption"]
PREFIX = "data/tree"


@pytest.fixture(scope="module")
def ray_two_cpus():
    """One Ray for the module's `workers: 2` runs (ingest reuses a Ray the process has)."""
    import ray

    from prx_data.compat.ray_config import in_process_ray_auth

    with in_process_ray_auth():
        ray.init(num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, configure_logging=False, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()


# Trees: writer(folder, version, ctx) fills ``folder`` with version 0 or 1 of a source ---------
def _jpeg(seed: int) -> bytes:
    return images.jpeg(48, 32, seed=seed)


def image_folder_tree(folder: Path, v: int, ctx: dict) -> None:
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jpg").write_bytes(_jpeg(1 if v == 0 else 101))  # edited in v1
    (folder / "a.txt").write_text("caption a")
    if v == 0:  # removed in v1
        (folder / "b.png").write_bytes(images.png(images.photo_like(20, 20, seed=2)))
        (folder / "b.json").write_text(json.dumps({"caption": "caption b"}))
    (folder / "sub" / "c.jpg").write_bytes(_jpeg(3))
    if v == 1:
        (folder / "sub" / "c.txt").write_text("sidecar added")
        (folder / "sub" / "d.jpg").write_bytes(_jpeg(4))  # added
    (folder / "big.jpg").write_bytes(images.jpeg(400, 300, seed=5))  # over max_bytes
    (folder / "bad.jpg").write_bytes(b"not an image at all")
    (folder / ".hidden.jpg").write_bytes(_jpeg(6))


def _parquet(path: Path, rows: list[dict], row_group_size: int = 2) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)


def parquet_bytes_tree(folder: Path, v: int, ctx: dict) -> None:
    folder.mkdir(parents=True)
    rows = [{"key": f"k{i}", "image": _jpeg(10 + i + (100 if (v, i) == (1, 1) else 0)), "caption": f"c{i}"} for i in range(4)]
    _parquet(folder / "part-0.parquet", rows)
    if v == 0:
        _parquet(folder / "part-1.parquet", [{"key": "k4", "image": _jpeg(14), "caption": "c4"}])
    else:
        _parquet(folder / "part-2.parquet", [{"key": "k5", "image": b"garbage", "caption": "c5"}])


def parquet_paths_tree(folder: Path, v: int, ctx: dict) -> None:
    (folder / "imgs").mkdir(parents=True)
    (folder / "imgs" / "0.jpg").write_bytes(_jpeg(20 if v == 0 else 120))
    (folder / "imgs" / "4.jpg").write_bytes(_jpeg(24))
    rows = [
        {"key": "p0", "path": "imgs/0.jpg"},
        {"key": "p2", "path": "../escape.jpg"},
        {"key": "p3", "path": "/etc/hostname"},
    ]
    rows += [{"key": "p1", "path": "imgs/missing.jpg"}] if v == 0 else [{"key": "p4", "path": "imgs/4.jpg"}]
    _parquet(folder / "meta.parquet", rows)


def parquet_urls_tree(folder: Path, v: int, ctx: dict) -> None:
    server = ctx["http"]
    folder.mkdir(parents=True)
    for i in range(3):
        server.add_route(f"/{i}.jpg", _jpeg(30 + i), headers={"Content-Type": "image/jpeg"})
    rows = [
        {"key": "u0", "url": server.url("/0.jpg"), "alt": f"caption v{v}"},
        {"key": "u9", "url": server.url("/nothing-here.jpg"), "alt": None},
    ]
    rows += (
        [{"key": "u1", "url": server.url("/1.jpg"), "alt": "one"}] if v == 0 else [{"key": "u2", "url": server.url("/2.jpg"), "alt": "two"}]
    )
    _parquet(folder / "urls.parquet", rows)


def jsonl_tree(folder: Path, v: int, ctx: dict) -> None:
    folder.mkdir(parents=True)

    def line(key, seed, caption):
        return json.dumps({"id": key, "img": base64.b64encode(_jpeg(seed)).decode(), "text": caption})

    (folder / "a.jsonl").write_text(
        "\n".join([line("j0", 40, "zero"), line("j1", 41, "one" if v == 0 else "one, edited"), "{not json"]) + "\n"
    )
    if v == 0:
        (folder / "b.jsonl").write_text(line("j2", 42, "two") + "\n")
    else:
        (folder / "c.jsonl").write_text(line("j3", 43, "three") + "\n")


def webdataset_tree(folder: Path, v: int, ctx: dict) -> None:
    layout = {
        "part-0.tar": [("t0-k0", 50 if v == 0 else 150, "zero"), ("t0-k1", 51, "one")],
        **({"part-1.tar": [("t1-k0", 52, "removed in v1")]} if v == 0 else {"part-2.tar": [("t2-k0", 53, "added in v1")]}),
    }
    folder.mkdir(parents=True)
    shards(folder / "shards", layout)


def lance_tree(folder: Path, v: int, ctx: dict) -> None:
    folder.mkdir(parents=True)
    rows = [{"key": "l0", "image": _jpeg(60), "caption": "zero"}, {"key": "l1", "image": _jpeg(61 if v == 0 else 161), "caption": "one"}]
    rows += [{"key": "l2", "image": _jpeg(62), "caption": "two"}] if v == 0 else [{"key": "l3", "image": _jpeg(63), "caption": "three"}]
    lance.write_dataset(pa.Table.from_pylist(rows), str(folder / "table.lance"))


# shape -> (tree writer, spec fields (location relative to the tree), S3-side workers)
SHAPES: dict[str, tuple[Callable, dict, int]] = {
    "image_folder": (image_folder_tree, dict(shape="image_folder", location="", max_bytes=4000), 2),
    "parquet_bytes": (
        parquet_bytes_tree,
        dict(shape="parquet", location="", fields={"key": "key", "image": "image", "caption": "caption"}),
        1,
    ),
    "parquet_paths": (
        parquet_paths_tree,
        dict(shape="parquet", location="meta.parquet", fields={"key": "key", "image": "path", "image_kind": "path"}),
        1,
    ),
    "parquet_urls": (
        parquet_urls_tree,
        dict(
            shape="parquet",
            location="*.parquet",
            fields={"key": "key", "image": "url", "image_kind": "url", "caption": "alt"},
            download={"allow_networks": LOCAL_NETWORKS, "retries": 0},
        ),
        1,
    ),
    "jsonl": (jsonl_tree, dict(shape="jsonl", location="", fields={"key": "id", "image": "img", "caption": "text"}), 1),
    "webdataset": (webdataset_tree, dict(shape="webdataset", location="**/*.tar"), 2),
    "lance": (lance_tree, dict(shape="lance", location="table.lance", fields={"key": "key", "image": "image", "caption": "caption"}), 1),
}


def mirror(folder: Path, client, bucket: str, prefix: str) -> None:
    """Make s3://bucket/prefix/ hold exactly ``folder``'s files (what a sync tool does)."""
    wanted = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
    for obj in listed:
        if obj["Key"][len(prefix) + 1 :] not in wanted:
            client.delete_object(Bucket=bucket, Key=obj["Key"])
    for rel, path in wanted.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=path.read_bytes())


def source(name: str, base: str, fields: dict, spec_dir: Path) -> RegisteredSource:
    spec = dict(fields)
    spec["location"] = f"{base}/{spec['location']}" if spec["location"] else base
    return RegisteredSource(SourceSpec(name=name, **spec), spec_dir / f"{name}.yaml")


def rows(uri: str, options: dict | None = None) -> list[tuple]:
    table = lance.dataset(uri, storage_options=options).to_table(columns=COLUMNS)
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_source_on_s3_ingests_as_the_same_local_folder_first_run_and_rerun(
    shape, tmp_path: Path, s3_server, s3_bucket, http_server, ray_two_cpus
):  # noqa: F811
    writer, fields, workers = SHAPES[shape]
    options, client = s3_server.options(), s3_server.client()
    local_tree = tmp_path / "tree"
    local_uri, remote_uri = str(tmp_path / "local.lance"), f"s3://{s3_bucket}/lance/remote.lance"
    local = source("src", str(local_tree), fields, tmp_path)
    remote = source("src", f"s3://{s3_bucket}/{PREFIX}", fields, tmp_path)

    history = []
    for version in (0, 1):
        shutil.rmtree(local_tree, ignore_errors=True)
        writer(local_tree, version, {"http": http_server})
        mirror(local_tree, client, s3_bucket, PREFIX)
        a = ingest_source(local, local_uri, workers=1)
        b = ingest_source(remote, remote_uri, workers=workers, storage_options=options)
        assert rows(local_uri) == rows(remote_uri, options)
        assert (a.new, a.updated, a.removed, a.metadata_updated) == (b.new, b.updated, b.removed, b.metadata_updated)
        assert b.workers == workers
        history.append(rows(remote_uri, options))
    statuses = {r[3] for h in history for r in h}
    assert "ok" in statuses
    assert history[0] != history[1]  # the re-run saw the added, edited and removed objects
    assert b.new and (b.updated or b.metadata_updated) and b.removed, (shape, b)
    if shape == "parquet_paths":
        by_key = {r[1]: r[3] for r in history[1]}
        assert by_key["p2"] == by_key["p3"] == "outside_root"
    if shape == "image_folder":
        by_key = {r[1]: r[3] for r in history[1]}
        assert by_key["big.jpg"] == "too_large" and ".hidden.jpg" not in by_key


def test_path_columns_naming_another_bucket_or_prefix_are_outside_root(tmp_path: Path, s3_server, s3_bucket):
    options, client = s3_server.options(), s3_server.client()
    other = s3_server.new_bucket()
    for bucket, key in ((s3_bucket, "tree/imgs/in.jpg"), (s3_bucket, "elsewhere/x.jpg"), (other, "tree/imgs/in.jpg")):
        client.put_object(Bucket=bucket, Key=key, Body=_jpeg(7))
    values = {
        "in": "imgs/in.jpg",
        "absolute-in": f"s3://{s3_bucket}/tree/imgs/in.jpg",
        "other-prefix": f"s3://{s3_bucket}/elsewhere/x.jpg",
        "other-bucket": f"s3://{other}/tree/imgs/in.jpg",
        "other-scheme": f"gs://{s3_bucket}/tree/imgs/in.jpg",
        "dotdot": "imgs/../../elsewhere/x.jpg",
        "dotdot-inside": "imgs/../imgs/in.jpg",
        "local": "/etc/hostname",
    }
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"key": list(values), "path": list(values.values())}), buf)
    client.put_object(Bucket=s3_bucket, Key="tree/meta.parquet", Body=buf.getvalue().to_pybytes())
    spec = SourceSpec(
        name="paths",
        shape="parquet",
        location=f"s3://{s3_bucket}/tree/meta.parquet",
        fields={"key": "key", "image": "path", "image_kind": "path"},
    )
    items = {i.key: i for i in read_source(RegisteredSource(spec, tmp_path / "paths.yaml"), options)}
    assert items["in"].data == items["absolute-in"].data == _jpeg(7)
    for key in ("other-prefix", "other-bucket", "other-scheme", "dotdot", "dotdot-inside", "local"):
        assert items[key].error_status == "outside_root", (key, items[key].error)
        assert items[key].data is None


def test_object_caps_hold_while_streaming(tmp_path: Path, s3_server, s3_bucket):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="f/small.jpg", Body=_jpeg(8))
    client.put_object(Bucket=s3_bucket, Key="f/huge.jpg", Body=b"\xff\xd8" + b"\0" * 200_000)
    client.put_object(Bucket=s3_bucket, Key="f/huge.txt", Body=b"x" * (1024 * 1024 + 1))  # sidecar over its cap
    client.put_object(Bucket=s3_bucket, Key="f/small.txt", Body=b"fine")
    spec = SourceSpec(name="caps", shape="image_folder", location=f"s3://{s3_bucket}/f", max_bytes=100_000)
    items = {i.key: i for i in read_source(RegisteredSource(spec, tmp_path / "caps.yaml"), s3_server.options())}
    assert items["small.jpg"].caption == "fine" and items["small.jpg"].data == _jpeg(8)
    assert items["huge.jpg"].error_status == "too_large" and items["huge.jpg"].data is None


# Bad input ------------------------------------------------------------------------------------
def _photos(bucket: str, tmp_path: Path, **extra) -> RegisteredSource:
    return RegisteredSource(SourceSpec(name="photos", shape="image_folder", location=f"s3://{bucket}/photos", **extra), tmp_path / "p.yaml")


def test_unauthorised_unreachable_and_missing_buckets_are_clear_errors(tmp_path: Path, s3_server, s3_bucket):
    from prx_data_tests.storage_parity import free_port

    good = s3_server.options()
    s3_server.client().put_object(Bucket=s3_bucket, Key="photos/a.jpg", Body=_jpeg(9))
    uri = str(tmp_path / "t.lance")
    assert ingest_source(_photos(s3_bucket, tmp_path), uri, storage_options=good).new == 1

    with pytest.raises(SourceUnavailable, match="credentials were refused; check AWS_ACCESS_KEY_ID") as err:
        ingest_source(_photos(s3_bucket, tmp_path), uri, source_storage_options={**good, "aws_secret_access_key": "wrong"})
    assert "Traceback" not in str(err.value) and f"s3://{s3_bucket}/photos" in str(err.value)
    with pytest.raises(SourceUnavailable, match="could not be reached; check PRX_S3_ENDPOINT"):
        ingest_source(
            _photos(s3_bucket, tmp_path),
            uri,
            source_storage_options={**good, "aws_endpoint": f"http://127.0.0.1:{free_port()}", "max_attempts": "1"},
        )
    with pytest.raises(SourceUnavailable, match="bucket does not exist"):
        ingest_source(_photos("prx-no-such-bucket", tmp_path), uri, storage_options=good)
    assert lance.dataset(uri).count_rows() == 1  # nothing lost


def test_an_emptied_prefix_follows_allow_empty(tmp_path: Path, s3_server, s3_bucket):
    options, client = s3_server.options(), s3_server.client()
    for name in ("a", "b"):
        client.put_object(Bucket=s3_bucket, Key=f"photos/{name}.jpg", Body=_jpeg(ord(name)))
    uri = str(tmp_path / "t.lance")
    assert ingest_source(_photos(s3_bucket, tmp_path), uri, storage_options=options).new == 2
    for name in ("a", "b"):
        client.delete_object(Bucket=s3_bucket, Key=f"photos/{name}.jpg")
    with pytest.raises(EmptySource, match="allow_empty"):
        ingest_source(_photos(s3_bucket, tmp_path), uri, storage_options=options)
    assert lance.dataset(uri).count_rows() == 2
    assert ingest_source(_photos(s3_bucket, tmp_path, allow_empty=True), uri, storage_options=options).removed == 2
    assert lance.dataset(uri).count_rows() == 0


def test_a_storage_profile_names_variables_and_never_holds_a_secret(tmp_path: Path, s3_server, s3_bucket, monkeypatch):
    s3_server.client().put_object(Bucket=s3_bucket, Key="photos/a.jpg", Body=_jpeg(9))
    profile = {"endpoint_env": "SRC_ENDPOINT", "access_key_id_env": "SRC_KEY", "secret_access_key_env": "SRC_SECRET", "region": "us-east-1"}
    uri = str(tmp_path / "t.lance")
    # The roots' settings point elsewhere: only the profile's variables reach this bucket.
    wrong_defaults = {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "x", "aws_secret_access_key": "y"}
    with pytest.raises(SourceUnavailable, match=r"unset environment variable\(s\) \['SRC_ENDPOINT', 'SRC_KEY', 'SRC_SECRET'\]"):
        ingest_source(_photos(s3_bucket, tmp_path, storage=profile), uri, storage_options=wrong_defaults)
    monkeypatch.setenv("SRC_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SRC_KEY", s3_server.access_key)
    monkeypatch.setenv("SRC_SECRET", "not-the-secret")
    with pytest.raises(SourceUnavailable, match="SRC_ENDPOINT, SRC_KEY, SRC_SECRET"):
        ingest_source(_photos(s3_bucket, tmp_path, storage=profile), uri, storage_options=wrong_defaults)
    monkeypatch.setenv("SRC_SECRET", s3_server.secret_key)
    assert ingest_source(_photos(s3_bucket, tmp_path, storage=profile), uri, storage_options=wrong_defaults).new == 1

    spec_file = tmp_path / "leaky.yaml"
    for storage in ({"secret_access_key": "wJalrXUtnFEMI/K7MDENG"}, {"secret_access_key_env": "wJalrXUtnFEMI/K7MDENG+abc"}):
        spec_file.write_text(
            json.dumps({"name": "leaky", "shape": "image_folder", "location": f"s3://{s3_bucket}/photos", "storage": storage})
        )
        with pytest.raises(ValueError, match="secrets never go in a spec|name of an environment variable"):
            load_spec(spec_file)


@pytest.mark.parametrize("pattern", ["*.tar", "**/*.tar", "sub/*.tar", "s?b/**/x[0-9].tar", "[!a]*.tar", "**", "sub/**/*.jsonl"])
def test_globs_match_the_same_objects_as_files(pattern, tmp_path: Path, s3_server, s3_bucket):
    from prx_data.ingest.read.source_files import list_files, make_root

    tree = tmp_path / "tree"
    for rel in ("a.tar", "b.tar", "sub/x1.tar", "sub/deep/x2.tar", "sub/deep/y.jsonl", "sab/x3.tar", "sub.tar"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(b"x")
    mirror(tree, s3_server.client(), s3_bucket, PREFIX)
    spec = SourceSpec(name="g", shape="webdataset", location="x")
    local = [p.relative_to(tree).as_posix() for p in list_files(tree / pattern, (".tar",))]
    uri = f"s3://{s3_bucket}/{PREFIX}/{pattern}"
    remote = [
        str(p).removeprefix(f"{s3_bucket}/{PREFIX}/") for p in list_files(uri, (".tar",), make_root(spec, uri, None, s3_server.options()))
    ]
    assert remote == local and local


# Change detection by object signature -------------------------------------------------------------
@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_rerun_opens_only_added_and_edited_objects(where, tmp_path: Path, s3_server, s3_bucket, ray_two_cpus, monkeypatch):
    """Signatures (ETag on S3, size+mtime on disk) decide which objects a re-run opens; kept
    objects' rows stay, edited ones are replaced, removed ones deleted, and a run killed between
    the table commit and the manifest write loses nothing (its objects are read again)."""
    from prx_data.ingest.plan import unit_manifest

    options, client = s3_server.options(), s3_server.client()
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(6):
        (tree / f"{i}.jpg").write_bytes(_jpeg(i))
    (tree / "0.txt").write_text("caption zero")
    prefix = f"rerun-{where}"
    if where == "s3":
        src = source("src", f"s3://{s3_bucket}/{prefix}", dict(shape="image_folder", location=""), tmp_path)
        uri, opts, workers = f"s3://{s3_bucket}/lance/{prefix}.lance", options, 2
    else:
        src = source("src", str(tree), dict(shape="image_folder", location=""), tmp_path)
        uri, opts, workers = str(tmp_path / "t.lance"), None, 1

    def sync():
        if where == "s3":
            mirror(tree, client, s3_bucket, prefix)

    def run(**kw):
        return ingest_source(src, uri, workers=workers, storage_options=opts, **kw)

    sync()
    first = run()
    assert (first.new, first.objects_unchanged) == (6, 0)

    (tree / "6.jpg").write_bytes(_jpeg(6))  # added
    sync()
    added = run()
    assert (added.objects_unchanged, added.units, added.new, added.unchanged, added.removed) == (6, 1, 1, 6, 0)
    assert len(rows(uri, opts)) == 7

    before = {r[1]: r[2] for r in rows(uri, opts)}
    (tree / "1.jpg").write_bytes(_jpeg(101))  # edited: same key, new bytes
    (tree / "0.txt").write_text("caption edited")  # a sidecar edit re-reads its image's entry
    (tree / "2.jpg").unlink()  # removed
    if where == "local":
        import os

        os.utime(tree / "0.txt", ns=(1, 2))  # a different mtime, whatever the clock's resolution
    sync()
    edited = run()
    after = {r[1]: r for r in rows(uri, opts)}
    assert edited.objects_unchanged == 4 and edited.updated == 1 and edited.metadata_updated == 1 and edited.removed == 1
    assert "2.jpg" not in after and after["1.jpg"][2] != before["1.jpg"] and after["0.jpg"][4] == "caption edited"

    # Killed after the table commit, before the manifest write: the added object is read again.
    (tree / "7.jpg").write_bytes(_jpeg(7))
    sync()
    real_commit = unit_manifest.ManifestRows.commit

    def killed(self, *a, **kw):
        raise KeyboardInterrupt("killed before the manifest write")

    monkeypatch.setattr(unit_manifest.ManifestRows, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        run()
    monkeypatch.setattr(unit_manifest.ManifestRows, "commit", real_commit)
    again = run()
    assert (again.objects_unchanged, again.units, again.unchanged, again.new) == (6, 1, 7, 0)
    assert len(rows(uri, opts)) == 7 and {r[3] for r in rows(uri, opts)} == {"ok"}

    forced = run(reread_unchanged=True)
    assert (forced.objects_unchanged, forced.unchanged, forced.new) == (0, 7, 0)
