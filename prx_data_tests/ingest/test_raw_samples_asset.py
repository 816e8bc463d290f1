"""raw_samples materialized through the real Dagster job, for every source shape and every
kind of bad input the foundation promises to survive."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq

from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data_tests import images
from prx_data_tests.conftest import materializations, run_source
from prx_data_tests.http_fixtures import slow, status


def spec(root: Path, name: str, body: str) -> None:
    (root / "sources" / f"{name}.yaml").write_text(f"name: {name}\n{body}")


def table(name: str) -> lance.LanceDataset:
    return lance.dataset(StoragePaths.from_settings(get_settings()).raw_table(name))


def rows_by_key(name: str) -> dict[str, dict]:
    t = table(name).to_table(
        columns=["source_key", "status", "error", "width", "height", "source_caption", "license", "image_format", "sample_id"]
    )
    return {r["source_key"]: r for r in t.to_pylist()}


BAD_FOLDER = {
    "ok/photo.jpg": images.jpeg(800, 600, seed=1),
    "ok/rotated.jpg": images.exif_rotated_jpeg(640, 480),
    "ok/cmyk.jpg": images.cmyk_jpeg(),
    "ok/deep.png": images.png16(),
    "ok/palette.png": images.palette_png_with_transparency(),
    "ok/anim.gif": images.animated_gif(),
    "bad/empty.jpg": b"",
    "bad/truncated.jpg": images.truncated_jpeg(),
    "bad/text.jpg": b"Dear diary, this is not an image.\n" * 20,
    "bad/bomb.png": images.decompression_bomb(12_000),
}


def test_image_folder_with_every_bad_input(data_root, prx_defs, instance):
    folder = data_root / "inputs" / "folder"
    for rel, data in BAD_FOLDER.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    (folder / "ok/photo.txt").write_text("A photo of noise.")
    (folder / "ok/rotated.json").write_text(json.dumps({"caption": "Rotated noise."}))
    spec(data_root, "folder", f"shape: image_folder\nlocation: {folder}\nlicense: cc-by-4.0\n")

    result = run_source(prx_defs, instance, "folder", selection=[_key("raw_samples")])
    assert result.success
    rows = rows_by_key("folder")
    assert set(rows) == set(BAD_FOLDER)
    expected = {
        "bad/empty.jpg": ("invalid_image", "empty file"),
        "bad/truncated.jpg": ("invalid_image", "truncated JPEG"),
        "bad/text.jpg": ("invalid_image", "not a recognised image"),
        "bad/bomb.png": ("too_large", "exceeds the limit"),
    }
    for key, row in rows.items():
        if key in expected:
            assert row["status"] == expected[key][0], key
            assert expected[key][1] in row["error"], key
        else:
            assert row["status"] == "ok", (key, row["error"])
    assert (rows["ok/rotated.jpg"]["width"], rows["ok/rotated.jpg"]["height"]) == (480, 640)
    assert rows["ok/photo.jpg"]["source_caption"] == "A photo of noise."
    assert rows["ok/rotated.jpg"]["source_caption"] == "Rotated noise."
    assert rows["ok/photo.jpg"]["license"] == "cc-by-4.0"
    assert rows["ok/photo.jpg"]["sample_id"] == sample_id("folder", "ok/photo.jpg")

    (mat,) = materializations(result, "raw_samples")
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["rows"] == len(BAD_FOLDER)
    assert meta["rows_by_status"] == {"invalid_image": 3, "ok": 6, "too_large": 1}
    assert meta["fragments"] == 1 and meta["lance_version"] >= 1
    assert meta["image_bytes_written"] > 0

    # Re-materializing is idempotent: same rows, no duplicates, no new version.
    version = table("folder").version
    again = run_source(prx_defs, instance, "folder", selection=[_key("raw_samples")])
    assert again.success
    assert table("folder").count_rows() == len(BAD_FOLDER)
    assert table("folder").version == version


def _key(name):
    import dagster as dg

    return dg.AssetKey(name)


def test_image_bytes_are_a_blob_column(data_root, prx_defs, instance):
    folder = data_root / "inputs" / "blob"
    folder.mkdir(parents=True)
    data = images.jpeg(seed=3)
    (folder / "a.jpg").write_bytes(data)
    spec(data_root, "blob", f"shape: image_folder\nlocation: {folder}\n")
    assert run_source(prx_defs, instance, "blob", selection=[_key("raw_samples")]).success
    ds = table("blob")
    assert "blob" in str(ds.schema.field("image").type)
    blob = ds.take_blobs("image", indices=[0])[0]
    assert blob is not None and blob.read() == data


def test_parquet_bytes_jsonl_paths_and_duplicate_keys(data_root, prx_defs, instance):
    inputs = data_root / "inputs"
    inputs.mkdir()
    records: list[dict[str, Any]] = [
        {"id": f"p{i}", "img": images.jpeg(320, 240, seed=10 + i), "alt": f"alt {i}", "lic": "cc0"} for i in range(5)
    ]
    records.append({"id": "p0", "img": images.jpeg(320, 240, seed=99), "alt": "dup", "lic": "cc0"})
    records.append({"id": "p-null", "img": None, "alt": "no image", "lic": None})
    pq.write_table(pa.Table.from_pylist(records), inputs / "meta.parquet", row_group_size=3)
    spec(
        data_root,
        "pq",
        f"shape: parquet\nlocation: {inputs / 'meta.parquet'}\nlicense: default-lic\n"
        "fields: {key: id, image: img, image_kind: bytes, caption: alt, license: lic}\n",
    )
    (inputs / "imgs").mkdir()
    (inputs / "imgs" / "a.jpg").write_bytes(images.jpeg(seed=20))
    lines = [
        {"k": "a", "path": "imgs/a.jpg", "caption": "path a"},
        {"k": "gone", "path": "imgs/missing.jpg"},
        {"k": "b64", "b": base64.b64encode(images.jpeg(seed=21)).decode()},
    ]
    (inputs / "paths.jsonl").write_text("\n".join(json.dumps(line) for line in lines[:2]) + "\nnot json\n")
    (inputs / "b64.jsonl").write_text(json.dumps(lines[2]) + "\n")
    spec(
        data_root,
        "js",
        f"shape: jsonl\nlocation: {inputs / 'paths.jsonl'}\nfields: {{key: k, image: path, image_kind: path, caption: caption}}\n",
    )
    spec(data_root, "js64", f"shape: jsonl\nlocation: {inputs / 'b64.jsonl'}\nfields: {{key: k, image: b, image_kind: bytes}}\n")

    result = run_source(prx_defs, instance, "pq", selection=[_key("raw_samples")])
    assert result.success
    rows = rows_by_key("pq")
    assert set(rows) == {"p0", "p1", "p2", "p3", "p4", "p-null"}
    assert rows["p0"]["source_caption"] == "alt 0"  # first of the duplicated key kept
    assert rows["p-null"]["status"] == "missing" and "empty" in rows["p-null"]["error"]
    assert rows["p-null"]["license"] == "default-lic"
    (mat,) = materializations(result, "raw_samples")
    assert mat.metadata["duplicate_keys"].value == 1

    assert run_source(prx_defs, instance, "js", selection=[_key("raw_samples")]).success
    rows = rows_by_key("js")
    assert rows["a"]["status"] == "ok" and rows["a"]["source_caption"] == "path a"
    assert rows["gone"]["status"] == "missing" and "missing file" in rows["gone"]["error"]
    assert rows["paths.jsonl:3"]["status"] == "invalid_record" and "not JSON" in rows["paths.jsonl:3"]["error"]

    assert run_source(prx_defs, instance, "js64", selection=[_key("raw_samples")]).success
    assert rows_by_key("js64")["b64"]["status"] == "ok"


def test_webdataset_and_lance_sources(data_root, prx_defs, instance):
    inputs = data_root / "inputs"
    inputs.mkdir()
    for shard in range(2):
        with tarfile.open(inputs / f"shard-{shard}.tar", "w") as tar:
            for i in range(3):
                key = f"s{shard}-{i}"
                members = {
                    f"{key}.jpg": images.jpeg(300, 200, seed=30 + shard * 3 + i),
                    f"{key}.txt": f"caption {key}".encode(),
                    f"{key}.json": json.dumps({"license": "cc-by", "url": f"https://x/{key}.jpg"}).encode(),
                }
                for name, data in members.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    spec(data_root, "wds", f"shape: webdataset\nlocation: {inputs}/*.tar\n")
    assert run_source(prx_defs, instance, "wds", selection=[_key("raw_samples")]).success
    rows = rows_by_key("wds")
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows.values())
    assert rows["s1-2"]["source_caption"] == "caption s1-2" and rows["s1-2"]["license"] == "cc-by"

    emb = pa.array([[float(i)] * 4 for i in range(3)], pa.list_(pa.float32(), 4))
    src = pa.table({"id": ["l0", "l1", "l2"], "image": [images.jpeg(seed=40 + i) for i in range(3)], "text": ["x", "y", "z"], "emb": emb})
    lance.write_dataset(src, str(inputs / "existing.lance"))
    spec(
        data_root,
        "lan",
        f"shape: lance\nlocation: {inputs / 'existing.lance'}\nembedding_dim: 4\nfields: {{key: id, image: image, caption: text, embedding: emb}}\n",
    )
    assert run_source(prx_defs, instance, "lan", selection=[_key("raw_samples")]).success
    t = table("lan").to_table(columns=["source_key", "embedding", "status"]).to_pylist()
    assert {r["source_key"]: r["embedding"] for r in t}["l2"] == [2.0] * 4


def test_url_source_downloads_with_statuses(data_root, prx_defs, instance, http_server):
    http_server.add_route("/a.jpg", images.jpeg(seed=50), headers={"Content-Type": "image/jpeg"})
    http_server.add_route("/noai.jpg", images.jpeg(seed=51), headers={"X-Robots-Tag": "noai"})
    http_server.add_route("/missing.jpg", status(404))
    http_server.add_route("/slow.jpg", slow(3.0, images.jpeg(seed=52)))
    http_server.add_route("/big.jpg", b"\xff" * 300_000)
    urls = {
        "a": http_server.url("/a.jpg"),
        "noai": http_server.url("/noai.jpg"),
        "404": http_server.url("/missing.jpg"),
        "slow": http_server.url("/slow.jpg"),
        "big": http_server.url("/big.jpg"),
        "ftp": "ftp://example.invalid/x.jpg",
        "file": "file:///etc/passwd",
    }
    inputs = data_root / "inputs"
    inputs.mkdir()
    (inputs / "urls.jsonl").write_text("".join(json.dumps({"k": k, "u": u}) + "\n" for k, u in urls.items()))
    spec(
        data_root,
        "urls",
        f"shape: jsonl\nlocation: {inputs / 'urls.jsonl'}\nfields: {{key: k, image: u, image_kind: url}}\n"
        "download: {timeout_s: 0.5, retries: 1, backoff_s: 0.01, max_bytes: 100000, allow_networks: ['127.0.0.0/8']}\n",
    )
    assert run_source(prx_defs, instance, "urls", selection=[_key("raw_samples")]).success
    rows = rows_by_key("urls")
    assert rows["a"]["status"] == "ok"
    assert rows["noai"]["status"] == "opted_out" and "noai" in rows["noai"]["error"]
    assert rows["404"]["status"] == "download_failed" and "404" in rows["404"]["error"]
    assert rows["slow"]["status"] == "download_failed" and "timeout" in rows["slow"]["error"].lower()
    assert rows["big"]["status"] == "too_large"
    for key in ("ftp", "file"):
        assert rows[key]["status"] == "download_failed" and "scheme" in rows[key]["error"]
    # Opted-out responses are not stored.
    noai = table("urls").to_table(columns=["image_sha256"], filter="status = 'opted_out'")
    assert noai.num_rows == 1 and noai.column("image_sha256")[0].as_py() is None

    # A second run fetches nothing that already succeeded.
    hits_before = http_server.hits("/a.jpg")
    assert run_source(prx_defs, instance, "urls", selection=[_key("raw_samples")]).success
    assert http_server.hits("/a.jpg") == hits_before
