"""The demo corpus: specs load, the manifest matches what is on disk, builds are reproducible.

These tests read the files with plain pyarrow/tarfile/PIL rather than the project's readers,
so a bug in a reader cannot hide a bug in the corpus (or the other way round).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import imagehash
import lance
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageOps

from prx_data.demo.corpus import (
    EMBEDDING_DIM,
    IMAGE_SUFFIXES,
    MAX_ASPECT,
    MIN_ASPECT,
    MIN_PIXELS,
    DemoManifest,
    build_demo_corpus,
    serve_folder,
)
from prx_data.ingest.registry import load_registry


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> DemoManifest:
    return build_demo_corpus(tmp_path_factory.mktemp("demo") / "corpus", seed=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("demo-http") / "corpus"
    with serve_folder(root / "http") as url_base:
        yield build_demo_corpus(root, seed=0, url_base=url_base)


def _stored_images(manifest: DemoManifest) -> dict[tuple[str, str], bytes | None]:
    """Image bytes per (source, key) as they sit on disk; None where there are none."""
    out: dict[tuple[str, str], bytes | None] = {}
    for name, src in manifest.sources.items():
        loc = src.location
        if src.shape == "image_folder":
            for path in loc.rglob("*"):
                if path.suffix.lower() in IMAGE_SUFFIXES:
                    out[(name, path.relative_to(loc).as_posix())] = path.read_bytes()
        elif src.shape == "parquet":
            for file in sorted(loc.parent.glob(loc.name)):
                for row in pq.read_table(file).to_pylist():
                    out[(name, row["key"])] = row["image_bytes"]
        elif src.shape == "jsonl":
            for line in loc.read_text().splitlines():
                record = json.loads(line)
                if "path" in record:
                    path = loc.parent / record["path"]
                    out[(name, record["id"])] = path.read_bytes() if path.exists() else None
                else:  # a URL: the bytes behind it are the file the manifest names under http/
                    rel = manifest.item(name, record["id"]).path
                    out[(name, record["id"])] = (manifest.root / rel).read_bytes() if rel else None
        elif src.shape == "webdataset":
            for file in sorted(loc.parent.glob(loc.name)):
                with tarfile.open(file) as tar:
                    for member in tar:
                        key, ext = member.name.split(".", 1)
                        if ext in ("jpg", "png"):
                            extracted = tar.extractfile(member)
                            assert extracted is not None
                            out[(name, key)] = extracted.read()
        elif src.shape == "lance":
            for row in lance.dataset(str(loc)).to_table(columns=["id", "image"]).to_pylist():
                out[(name, row["id"])] = row["image"]
    return out


def _disk_count(shape: str, loc: Path) -> tuple[int, list[str]]:
    """Items as a reader of that shape would find them: (count, keys in order)."""
    if shape == "image_folder":
        keys = sorted(p.relative_to(loc).as_posix() for p in loc.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        return len(keys), keys
    if shape == "parquet":
        keys = [k for f in sorted(loc.parent.glob(loc.name)) for k in pq.read_table(f, columns=["key"])["key"].to_pylist()]
        return len(keys), keys
    if shape == "jsonl":
        keys = [json.loads(line)["id"] for line in loc.read_text().splitlines() if line.strip()]
        return len(keys), keys
    if shape == "webdataset":
        keys = []
        for f in sorted(loc.parent.glob(loc.name)):
            with tarfile.open(f) as tar:
                for name in tar.getnames():
                    key = name.split(".", 1)[0]
                    if not keys or keys[-1] != key:
                        keys.append(key)
        return len(keys), keys
    if shape == "lance":
        ds = lance.dataset(str(loc))
        return ds.count_rows(), ds.to_table(columns=["id"])["id"].to_pylist()
    raise AssertionError(shape)


def test_every_spec_loads(corpus: DemoManifest) -> None:
    registry = load_registry(corpus.sources_dir)
    assert registry.errors == []
    assert set(registry.sources) == set(corpus.sources) == {"photos", "web", "links", "shards", "archive"}
    for name, source in registry.sources.items():
        assert not Path(source.spec.location).is_absolute()
        assert Path(source.resolve_location()).resolve() == corpus.sources[name].location
        assert source.spec.shape == corpus.sources[name].shape
    shapes = {s.spec.shape for s in registry.sources.values()}
    assert shapes == {"image_folder", "parquet", "jsonl", "webdataset", "lance"}
    archive = registry.get("archive").spec
    assert archive.fields.embedding == "embedding" and archive.embedding_dim == EMBEDDING_DIM
    assert len({s.spec.priority for s in registry.sources.values()}) == len(registry.sources)


def test_counts_and_keys_match_disk(corpus: DemoManifest) -> None:
    for name, src in corpus.sources.items():
        count, keys = _disk_count(src.shape, src.location)
        assert count == src.count == corpus.counts[name], name
        if src.shape == "image_folder":
            assert keys == sorted(src.keys)
        else:
            assert keys == src.keys, name
    assert corpus.sources["links"].duplicate_keys == ["link-005"]
    assert len(list(corpus.sources["shards"].location.parent.glob("*.tar"))) == 2


def test_lance_archive_schema(corpus: DemoManifest) -> None:
    ds = lance.dataset(str(corpus.sources["archive"].location))
    schema = ds.schema
    assert set(schema.names) == {"id", "image", "text", "license", "embedding"}
    emb = schema.field("embedding").type
    assert emb.list_size == EMBEDDING_DIM and str(emb.value_type) == "float"


def test_statuses_match_the_bytes(corpus: DemoManifest) -> None:
    stored = _stored_images(corpus)
    for (name, key), status in corpus.statuses.items():
        data = stored.get((name, key))
        item = corpus.item(name, key)
        if status == "missing":
            assert data is None, (name, key)
            continue
        assert data is not None, (name, key)
        if status == "too_large":
            Image.MAX_IMAGE_PIXELS, previous = None, Image.MAX_IMAGE_PIXELS
            try:
                w, h = Image.open(io.BytesIO(data)).size  # header only: never decode a bomb
            finally:
                Image.MAX_IMAGE_PIXELS = previous
            assert w * h > 100_000_000 and len(data) < 200_000
        elif status == "invalid_image":
            with pytest.raises((OSError, SyntaxError, ValueError)):  # what Pillow raises on bad bytes
                Image.open(io.BytesIO(data)).load()
        else:
            assert status == "ok"
            img = Image.open(io.BytesIO(data))
            img.load()
            shown = ImageOps.exif_transpose(img)
            assert shown.size == (item.width, item.height), (name, key)


def test_photo_folder_has_the_awkward_files(corpus: DemoManifest) -> None:
    photos = corpus.sources["photos"].location
    modes = {
        p.relative_to(photos).as_posix(): Image.open(p)
        for p in photos.rglob("*")
        if p.suffix in (".png", ".gif") and p.stat().st_size < 5_000_000 and "bomb" not in p.name
    }
    assert modes["science/camera_16bit.png"].mode == "I;16"
    assert modes["odd/ihc_palette.png"].mode == "P" and "transparency" in modes["odd/ihc_palette.png"].info
    assert modes["odd/logo_rgba.png"].mode == "RGBA"
    assert getattr(modes["odd/animated.gif"], "n_frames", 1) >= 2
    assert Image.open(photos / "odd/hubble_cmyk.jpg").mode == "CMYK"
    rotated = Image.open(photos / "science/cell_exif6.jpg")
    assert rotated.getexif()[0x0112] == 6
    item = corpus.item("photos", "science/cell_exif6.jpg")
    assert rotated.size == (item.height, item.width) != (item.width, item.height)
    assert (photos / "broken/empty.jpg").stat().st_size == 0
    # Captions: some .txt, some .json, some none, and the manifest knows which.
    sidecars = {p.suffix for p in photos.rglob("*") if p.suffix in (".txt", ".json")}
    assert sidecars == {".txt", ".json"}
    captions = [i.caption for i in corpus.sources["photos"].items]
    assert None in captions and any(captions)
    for item in corpus.sources["photos"].items:
        path = photos / item.key
        txt, meta = path.with_suffix(".txt"), path.with_suffix(".json")
        found = txt.read_text().strip() if txt.exists() else json.loads(meta.read_text())["caption"] if meta.exists() else None
        assert found == item.caption, item.key


def test_size_and_aspect_labels(corpus: DemoManifest) -> None:
    assert corpus.too_small and corpus.bad_aspect
    for name, src in corpus.sources.items():
        for item in src.items:
            if item.status != "ok":
                continue
            ref = (name, item.key)
            assert item.width and item.height
            assert (ref in corpus.too_small) == (item.width * item.height < MIN_PIXELS)
            assert (ref in corpus.bad_aspect) == (not MIN_ASPECT <= item.width / item.height <= MAX_ASPECT)
    assert ("photos", "wide/banner.png") in corpus.bad_aspect
    assert len(corpus.text_heavy) >= 6 and {s for s, _ in corpus.text_heavy} >= {"photos", "web", "shards", "archive"}


def test_duplicate_groups(corpus: DemoManifest) -> None:
    stored = {ref: data for ref, data in _stored_images(corpus).items() if data is not None}
    assert corpus.exact_duplicates and corpus.near_duplicates
    for group in corpus.exact_duplicates:
        assert len({s for s, _ in group}) >= 2  # every exact group spans sources
        assert len({hashlib.sha256(stored[r]).digest() for r in group}) == 1
        assert any(set(group) <= set(near) for near in corpus.near_duplicates)
    near_only = [g for g in corpus.near_duplicates if len({hashlib.sha256(stored[r]).digest() for r in g}) > 1]
    assert near_only, "some near-duplicate group must hold re-encoded or resized copies"
    # The exact rule (docs/dedup.md, k = 0): two images are duplicates when their 64-bit DCT hashes are equal; check that
    # the declared groups hold that way, and that nothing else collides by accident.
    hashes = {}
    for ref, status in corpus.statuses.items():
        if status == "ok":
            img = ImageOps.exif_transpose(Image.open(io.BytesIO(stored[ref])))
            if img.mode not in ("L", "RGB"):
                img = img.convert("RGBA").convert("RGB")  # via RGBA: palette transparency kept sane
            hashes[ref] = imagehash.phash(img)
    group_of = {ref: i for i, g in enumerate(corpus.near_duplicates) for ref in g}
    for group in corpus.near_duplicates:
        assert len({str(hashes[r]) for r in group}) == 1, group
    for a, b in itertools.combinations(hashes, 2):
        if group_of.get(a) is None or group_of.get(a) != group_of.get(b):
            assert hashes[a] - hashes[b] > 4, (a, b)


def test_same_seed_same_bytes(tmp_path: Path, corpus: DemoManifest) -> None:
    again = build_demo_corpus(tmp_path / "again", seed=0)
    other = build_demo_corpus(tmp_path / "other", seed=1)

    def digests(root: Path) -> dict[str, str]:
        # Lance names its files with random UUIDs and stamps its manifests: compare its rows.
        return {
            p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
            and not any(part.endswith(".lance") for part in p.relative_to(root).parts)
            and p.name != "manifest.json"  # it names the root folder
        }

    first, second = digests(corpus.root), digests(again.root)
    assert first == second and len(first) > 50
    table = lambda m: lance.dataset(str(m.sources["archive"].location)).to_table()  # noqa: E731
    assert table(corpus).equals(table(again))
    strip = lambda m: json.dumps(m.to_json()).replace(str(m.root), "ROOT")  # noqa: E731
    assert strip(corpus) == strip(again)
    # Another seed changes content, not structure.
    assert digests(other.root) != first and set(digests(other.root)) == set(first)
    assert other.counts == corpus.counts and other.bad == corpus.bad


def test_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    root = tmp_path / "c"
    (root / "unrelated.txt").parent.mkdir(parents=True)
    (root / "unrelated.txt").write_text("keep me")
    (root / "sources").mkdir()  # empty, as a data-root fixture leaves it
    build_demo_corpus(root)
    with pytest.raises(FileExistsError):
        build_demo_corpus(root)
    manifest = build_demo_corpus(root, overwrite=True)
    assert (root / "unrelated.txt").read_text() == "keep me"
    assert load_registry(manifest.sources_dir).errors == []


def test_size_budget(corpus: DemoManifest) -> None:
    total = sum(p.stat().st_size for p in corpus.root.rglob("*") if p.is_file())
    assert 2_000_000 < total < 40_000_000


def test_remote_source_over_http(served: DemoManifest) -> None:
    registry = load_registry(served.sources_dir)
    assert registry.errors == [] and registry.get("remote").spec.fields.image_kind == "url"
    remote = served.sources["remote"]
    count, keys = _disk_count("jsonl", remote.location)
    assert count == remote.count and keys == remote.keys
    seen = set()
    for item in remote.items:
        seen.add(item.status)
        assert item.url is not None
        if item.url.startswith("ftp://"):
            assert item.status == "download_failed"
            continue
        assert item.url.startswith(f"{served.url_base}/")
        try:
            with urllib.request.urlopen(item.url, timeout=5) as resp:
                code, body, robots = resp.status, resp.read(), resp.headers.get("X-Robots-Tag")
        except urllib.error.HTTPError as err:
            code, body, robots = err.code, b"", None
        if item.status == "download_failed":
            assert code == 404
        elif item.status == "opted_out":
            assert code == 200 and robots == "noai"
        else:
            assert code == 200 and robots is None
            assert item.path is not None
            assert body == (served.root / item.path).read_bytes()
    assert seen == {"ok", "download_failed", "opted_out", "invalid_image"}
    assert {p.relative_to(served.root / "http").as_posix() for p in (served.root / "http").rglob("*") if p.is_file()} >= set(
        served.http_headers
    )
