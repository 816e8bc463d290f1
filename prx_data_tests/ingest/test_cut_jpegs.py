"""Issue 22.5: a JPEG cut mid-scan is rejected at ingest whatever its last bytes.

A cut file that ends in ``FF D9`` (the end-of-image marker) passes a look at its tail and the
structure walk, and Pillow decodes it silently with the missing rows flat grey. The probe now
has libjpeg-turbo read every scan with warnings as errors; these tests go through the real
ingest (``raw_samples`` in Dagster, and ``ingest_source`` on a local and an S3 root) and fail on
the code before the check.
"""

from __future__ import annotations

import io

import lance
import pytest
from PIL import Image

from prx_data.core.paths import StoragePaths
from prx_data.core.schema import Status
from prx_data.core.settings import get_settings
from prx_data.ingest import probe as probe_module
from prx_data.ingest.ingest import ingest_source
from prx_data.ingest.probe import probe_image
from prx_data.ingest.registry import load_registry
from prx_data_tests import images
from prx_data_tests.conftest import run_source

LIMIT = 100_000_000
EOI = b"\xff\xd9"


def _save(img: Image.Image, **options) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **options)
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


def test_the_cut_files_fool_pillow():
    """The premise: without the check, every cut file ending in EOI would be taken as whole."""
    fooling = [k for k in BAD if k.endswith("+eoi.jpg")]
    assert fooling and all(_pillow_decodes(BAD[k]) for k in fooling)


@pytest.mark.parametrize("name", sorted(BAD))
def test_cut_or_corrupt_jpegs_are_invalid(name):
    probe = probe_image(BAD[name], LIMIT)
    assert probe.status == Status.INVALID_IMAGE, name
    if name.endswith("+eoi.jpg"):
        assert probe.error == "truncated or corrupt JPEG data: premature end of data segment"
    elif name.startswith("cut/"):
        assert probe.error.startswith("truncated JPEG")
    else:
        assert probe.error.startswith("truncated or corrupt JPEG data:"), probe.error
    assert (probe.width, probe.height) != (None, None)  # the header was read, the data was not whole


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_jpegs_of_every_kind_stay_ok(name):
    assert _pillow_decodes(GOOD[name])
    probe = probe_image(GOOD[name], LIMIT)
    assert probe.status == Status.OK, (name, probe.error)


def test_every_cut_point_of_a_progressive_file_is_caught():
    # Cuts inside chroma-only scans too: the check decodes to grey, but must still read them.
    data = GOOD["progressive.jpg"]
    first_scan = data.index(b"\xff\xda")
    accepted = [
        cut for cut in range(first_scan + 16, len(data) - 2, max(1, len(data) // 150))
        if probe_image(data[:cut] + EOI, LIMIT).status == Status.OK
    ]
    assert accepted == []


def test_the_check_can_be_switched_off_for_measurement():
    cut = BAD["cut/baseline+eoi.jpg"]
    assert probe_image(cut, LIMIT, verify_jpeg_data=False).status == Status.OK  # the old behaviour
    assert probe_image(cut, LIMIT).status == Status.INVALID_IMAGE


def test_pixel_limit_is_applied_before_any_decode(monkeypatch):
    calls = []
    monkeypatch.setattr(probe_module.simplejpeg, "decode_jpeg", lambda *a, **k: calls.append(1))
    big = _save(Image.new("RGB", (2000, 1500), "white"))
    probe = probe_image(big, max_pixels=1_000_000)
    assert probe.status == Status.TOO_LARGE and calls == []


def _folder(root, files: dict[str, bytes]):
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_raw_samples_of_a_folder_rejects_cut_jpegs(data_root, prx_defs, instance):
    import dagster as dg

    folder = data_root / "inputs" / "uploads"
    _folder(folder, {**GOOD, **BAD})
    (data_root / "sources" / "uploads.yaml").write_text(f"name: uploads\nshape: image_folder\nlocation: {folder}\n")
    result = run_source(prx_defs, instance, "uploads", selection=[dg.AssetKey("raw_samples")])
    assert result.success
    table = lance.dataset(StoragePaths.from_settings(get_settings()).raw_table("uploads"))
    rows = {r["source_key"]: r for r in table.to_table(columns=["source_key", "status", "error"]).to_pylist()}
    assert set(rows) == set(GOOD) | set(BAD)  # nothing lost: every bad file is a row
    assert {k for k, r in rows.items() if r["status"] == "ok"} == set(GOOD)
    for key in BAD:
        assert rows[key]["status"] == "invalid_image" and rows[key]["error"], key
    assert rows["cut/progressive+eoi.jpg"]["error"] == "truncated or corrupt JPEG data: premature end of data segment"


def test_ingest_rejects_cut_jpegs_on_every_root(storage_root, tmp_path):
    photos = tmp_path / "photos"
    files = {k: GOOD[k] for k in ("baseline.jpg", "progressive.jpg")} | {
        k: BAD[k] for k in ("cut/baseline+eoi.jpg", "cut/progressive+eoi.jpg")
    }
    _folder(photos, files)
    specs = tmp_path / "sources"
    specs.mkdir()
    (specs / "photos.yaml").write_text("name: photos\nshape: image_folder\nlocation: ../photos\n")
    uri = storage_root.uri("lance", "photos.lance")
    ingest_source(load_registry(specs).get("photos"), uri, storage_options=storage_root.options)
    rows = lance.dataset(uri, storage_options=storage_root.options).to_table(columns=["source_key", "status"]).to_pylist()
    assert {r["source_key"]: r["status"] for r in rows} == {
        "baseline.jpg": "ok",
        "progressive.jpg": "ok",
        "cut/baseline+eoi.jpg": "invalid_image",
        "cut/progressive+eoi.jpg": "invalid_image",
    }
