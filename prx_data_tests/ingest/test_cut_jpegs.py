"""Issue 22.5: a JPEG cut mid-scan is never exported, whatever its last bytes.

A cut file that ends in ``FF D9`` (the end-of-image marker) passes a look at its tail and the
structure walk, and Pillow decodes it silently with the missing rows flat grey. Its scans are
checked where they are first Huffman-decoded, the perceptual hash's decode (libjpeg-turbo with
warnings as errors, ``imaging.jpeg_data``): the row gets a ``phash_error``, no hash (so it is
never the kept copy of a duplicate group) and the export drops it. Ingest keeps to the header
and the structure walk, so a file cut without its end marker is still refused there. These tests
go through the real ingest, hash and export (``raw_samples`` and ``phashes`` in Dagster, and the
stage functions on a local and an S3 root, read back through the training loader).
"""

from __future__ import annotations

import io

import lance
import numpy as np
import pytest
from PIL import Image

from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.core.schema import Status
from prx_data.core.settings import get_settings
from prx_data.imaging import jpeg_data
from prx_data.imaging.decode import HASH_DRAFT_SIDE, load_pixels, open_for_hash, read_header
from prx_data.imaging.phash import phash_row
from prx_data.ingest.rows.image_probe import probe_image
from prx_data_tests import images
from prx_data_tests.conftest import run_source
from prx_data_tests.curation.optout_world import Item, World

LIMIT = 100_000_000
EOI = b"\xff\xd9"


def _save(img: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def _save_mpo(first: Image.Image, second: Image.Image) -> bytes:
    buf = io.BytesIO()
    first.save(buf, "MPO", save_all=True, append_images=[second], quality=90)
    return buf.getvalue()


def _good() -> dict[str, bytes]:
    photo = images.photo_like(480, 360, seed=5)
    return {
        "baseline.jpg": _save(photo),
        "progressive.jpg": _save(photo, progressive=True),
        "gray.jpg": _save(photo.convert("L")),
        "gray-progressive.jpg": _save(photo.convert("L"), progressive=True),
        "cmyk.jpg": _save(photo.convert("CMYK")),
        "444.jpg": _save(photo, subsampling=0),
        "restarts.jpg": _save(photo, restart_marker_blocks=3),
        "rotated.jpg": images.exif_rotated_jpeg(320, 240),
        # A camera MPO: a JPEG with a second frame after its end marker (hashed as its first).
        "camera.mpo": _save_mpo(photo, images.photo_like(480, 360, seed=6)),
        # Junk between the last scan and EOI (some cameras pad there): the picture is whole.
        "padded-before-eoi.jpg": _save(photo)[:-2] + b"\x00\x00\x00" + EOI,
        "trailing-bytes.jpg": _save(photo) + b"appended by a phone app" * 40,
    }


GOOD = _good()
CUT_SOURCES = ("baseline.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg", "restarts.jpg")


def _cut(data: bytes, with_eoi: bool) -> bytes:
    cut = data[: len(data) * 2 // 3]
    return cut + EOI if with_eoi else cut


def _bad() -> dict[str, bytes]:
    bad = {}
    for name in CUT_SOURCES:
        stem = name.removesuffix(".jpg")
        bad[f"cut/{stem}+eoi.jpg"] = _cut(GOOD[name], True)
        bad[f"cut/{stem}.jpg"] = _cut(GOOD[name], False)
    # Damage inside the scan rather than a cut: a stray restart marker, a wrong restart number.
    base = GOOD["baseline.jpg"]
    middle = len(base) // 2
    bad["corrupt/stray-marker.jpg"] = base[:middle] + b"\xff\xd3" + base[middle:]
    restarts = GOOD["restarts.jpg"]
    rst = restarts.index(b"\xff\xd4", len(restarts) // 2)
    bad["corrupt/wrong-restart.jpg"] = restarts[:rst] + b"\xff\xd6" + restarts[rst + 2 :]
    return bad


BAD = _bad()


def _pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
        return True
    except Exception:
        return False


def _unchecked_hash_pixels(data: bytes) -> np.ndarray:
    """What the hash decoded before the check: Pillow's draft decode, which checks nothing."""
    return np.asarray(load_pixels(read_header(data, LIMIT), "L", (HASH_DRAFT_SIDE, HASH_DRAFT_SIDE)))


def test_the_cut_files_fool_pillow():
    """The premise: without the check, every cut file ending in EOI would be taken as whole."""
    fooling = [k for k in BAD if k.endswith("+eoi.jpg")]
    assert fooling and all(_pillow_decodes(BAD[k]) for k in fooling)
    assert all(_unchecked_hash_pixels(BAD[k]).size for k in fooling)


@pytest.mark.parametrize("name", sorted(BAD))
def test_cut_or_corrupt_jpegs_get_no_hash(name):
    row = phash_row(BAD[name], LIMIT)
    assert row["phash"] is None, name
    error = str(row["phash_error"])
    if name.endswith("+eoi.jpg"):
        assert error == "invalid_image: truncated or corrupt JPEG data: premature end of data segment"
    elif name.startswith("cut/"):
        assert error == "truncated: the JPEG file ends inside its picture data"
    else:
        assert error.startswith("invalid_image: truncated or corrupt JPEG data:"), error


@pytest.mark.parametrize("name", sorted(BAD))
def test_ingest_refuses_a_file_cut_without_its_end_marker_and_leaves_the_rest_to_the_hash(name):
    probe = probe_image(BAD[name], LIMIT)
    if name.startswith("cut/") and not name.endswith("+eoi.jpg"):
        assert probe.status == Status.INVALID_IMAGE and (probe.error or "").startswith("truncated JPEG"), probe
    else:
        assert probe.status == Status.OK, probe  # structurally whole: the hash's decode judges
    assert (probe.width, probe.height) != (None, None)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_jpegs_of_every_kind_hash_as_the_unchecked_decode_did(name):
    assert _pillow_decodes(GOOD[name])
    assert probe_image(GOOD[name], LIMIT).status == Status.OK
    row = phash_row(GOOD[name], LIMIT)
    assert row["phash_error"] is None and row["phash"] is not None
    # Same pixels, so PHASH_VERSION stays and hashes already stored keep matching new ones.
    gray, _box = open_for_hash(GOOD[name], LIMIT)
    assert np.array_equal(np.asarray(gray), _unchecked_hash_pixels(GOOD[name])), name


@pytest.mark.parametrize("size", [(800, 600), (1001, 777), (333, 1280), (130, 90), (64, 64), (50, 700)])
def test_the_checked_decode_gives_the_draft_decodes_pixels_at_every_scale(size):
    photo = images.photo_like(size[0], size[1], seed=size[0])
    for options in ({}, {"progressive": True}, {"subsampling": 0}, {"subsampling": 1}):
        data = _save(photo, **options)
        gray, _box = open_for_hash(data, LIMIT)
        assert np.array_equal(np.asarray(gray), _unchecked_hash_pixels(data)), (size, options)


def test_every_cut_point_of_a_progressive_file_is_caught():
    # Cuts inside chroma-only scans too: the hash decodes to grey, but must still read them.
    data = GOOD["progressive.jpg"]
    first_scan = data.index(b"\xff\xda")
    accepted = [
        cut
        for cut in range(first_scan + 16, len(data) - 2, max(1, len(data) // 150))
        if phash_row(data[:cut] + EOI, LIMIT)["phash_error"] is None
    ]
    assert accepted == []


def test_pixel_limit_is_applied_before_any_decode(monkeypatch):
    calls = []
    monkeypatch.setattr(jpeg_data.simplejpeg, "decode_jpeg", lambda *a, **k: calls.append(1))
    big = _save(Image.new("RGB", (2000, 1500), "white"))
    assert probe_image(big, max_pixels=1_000_000).status == Status.TOO_LARGE
    assert str(phash_row(big, max_pixels=1_000_000)["phash_error"]).startswith("too_large")
    assert calls == []


def _folder(root, files: dict[str, bytes]):
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_raw_samples_and_phashes_of_a_folder_record_every_cut_jpeg(data_root, prx_defs, instance):
    import dagster as dg

    folder = data_root / "inputs" / "uploads"
    _folder(folder, {**GOOD, **BAD})
    (data_root / "sources" / "uploads.yaml").write_text(f"name: uploads\nshape: image_folder\nlocation: {folder}\n")
    result = run_source(prx_defs, instance, "uploads", selection=[dg.AssetKey("raw_samples"), dg.AssetKey("phashes")])
    assert result.success
    table = lance.dataset(StoragePaths.from_settings(get_settings()).raw_table("uploads"))
    rows = {r["source_key"]: r for r in table.to_table(columns=["source_key", "status", "error", "phash", "phash_error"]).to_pylist()}
    assert set(rows) == set(GOOD) | set(BAD)  # nothing lost: every bad file is a row
    for key in GOOD:
        assert rows[key]["status"] == "ok" and rows[key]["phash"] is not None, key
    for key in BAD:
        row = rows[key]
        unusable = row["status"] == "invalid_image" or (row["status"] == "ok" and row["phash"] is None and row["phash_error"])
        assert unusable and (row["error"] or row["phash_error"]), (key, row)
    assert rows["cut/progressive+eoi.jpg"]["phash_error"] == "invalid_image: truncated or corrupt JPEG data: premature end of data segment"


def test_a_cut_copy_is_dropped_and_the_whole_copy_exported_on_every_root(storage_root, tmp_path, monkeypatch):
    """The cut copy of an image gets no hash, so it cannot be the kept copy of the pair: the
    whole one is exported, the cut one dropped with its reason, and the loader never yields it."""
    world = World.on_root(storage_root, tmp_path / "data", monkeypatch)
    world.sources["s1"] = {
        "a": Item((0, "exact"), "https://a.example.org/a.jpg"),
        "b-cut": Item((1, "cut"), "https://a.example.org/b-cut.jpg"),
        "b": Item((1, "exact"), "https://a.example.org/b.jpg"),
    }
    world.chain("s1")
    world.merge()
    world.rebuild_skip_lists()
    exports = lance.dataset(world.paths.exports_table("s1"), storage_options=world.options)
    drops = {r["sample_id"]: r["drop_reason"] for r in exports.to_table(columns=["sample_id", "drop_reason"]).to_pylist()}
    assert drops[sample_id("s1", "b-cut")] == "invalid_image: truncated or corrupt JPEG data: premature end of data segment"
    assert drops[sample_id("s1", "a")] is None and drops[sample_id("s1", "b")] is None
    assert world.yielded(tmp_path / "cache") == {sample_id("s1", "a"), sample_id("s1", "b")}
