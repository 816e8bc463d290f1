"""Issue 11.3: tolerant, honest decoding at ingest, on a collection of real-world quirks.

Every file is made from a real photo (the ones scikit-image ships, via benchmarks.photos) with
the quirk cameras, editors and servers add. The ground truth is Pillow itself: a file is ``ok``
exactly when Pillow decodes it completely, and ``truncated`` only when its picture data really
ends early. The probe reaches that verdict without decoding ordinary files (checked below by
counting decodes).
"""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from benchmarks.photos import make_photo
from prx_data.core.schema import Status
from prx_data.ingest.rows import image_probe as probe_module
from prx_data.ingest.rows.image_probe import probe_image

LIMIT = 100_000_000


def _photo(index: int) -> Image.Image:
    return make_photo(index, seed=17, megapixels=(0.15, 0.25))


def _save(img: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_with_text_after_idat(png: bytes) -> bytes:
    iend = png.rindex(b"IEND") - 4
    return png[:iend] + _png_chunk(b"tEXt", b"Comment\x00written after the pixels") + png[iend:]


def _webp_with_extra_chunk(webp: bytes) -> bytes:
    extra = b"XTRA" + struct.pack("<I", 6) + b"extra!"
    body = webp[12:] + extra
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def _collection() -> dict[str, bytes]:
    jpeg = _save(_photo(0), "JPEG", quality=88)
    progressive = _save(_photo(1), "JPEG", quality=85, progressive=True)
    restarts = _save(_photo(2), "JPEG", quality=85, restart_marker_blocks=4)
    thumb = _save(_photo(3).resize((96, 80)), "JPEG", quality=70)
    png = _save(_photo(4), "PNG")
    webp = _save(_photo(5), "WEBP", quality=80)
    commented = _save(_photo(6), "JPEG", quality=85, comment=b"marker bytes \xff\xd9 inside a comment")
    return {
        # accepted: every one decodes fully in Pillow
        "jpeg": jpeg,
        "jpeg+trailing-bytes": jpeg + b"Exif trailer from a phone app " * 200,
        "jpeg+trailing-zeros": jpeg + b"\0" * 8192,
        "jpeg+appended-thumbnail": jpeg + thumb,
        "jpeg+comment-with-eoi": commented,
        "progressive": progressive,
        "progressive+trailing": progressive + b"\xde\xad\xbe\xef" * 1000,
        "restart-markers": restarts,
        "restart-markers+padding": restarts + b"\r\n" * 64,
        "png+text-after-idat": _png_with_text_after_idat(png),
        "png+bytes-after-iend": png + b"trailing garbage after IEND " * 50,
        "webp+extra-chunk": _webp_with_extra_chunk(webp),
        "webp+bytes-after-riff": webp + b"\0" * 4096,
        # refused: the picture data ends early
        "jpeg-cut": jpeg[: len(jpeg) * 6 // 10],
        "progressive-cut": progressive[: len(progressive) // 3],
        "restart-markers-cut": restarts[: len(restarts) // 2],
        "comment-with-eoi-cut": commented[: len(commented) // 2],
        "png-cut": png[: len(png) // 2],
        "webp-cut": webp[: len(webp) // 2],
    }


COLLECTION = _collection()
ACCEPTED = [k for k in COLLECTION if "cut" not in k]
CUT = [k for k in COLLECTION if "cut" in k]


def _pillow_decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
        return True
    except Exception:
        return False


@pytest.mark.parametrize("name", ACCEPTED)
def test_quirky_but_complete_files_are_ok(name):
    data = COLLECTION[name]
    assert _pillow_decodes(data), "the collection itself must hold decodable files"
    probe = probe_image(data, LIMIT)
    assert probe.status == Status.OK, (name, probe.error)


@pytest.mark.parametrize("name", CUT)
def test_files_whose_picture_data_ends_early_are_truncated(name):
    data = COLLECTION[name]
    assert not _pillow_decodes(data)
    probe = probe_image(data, LIMIT)
    assert probe.status == Status.INVALID_IMAGE, name
    assert probe.error


def test_ordinary_files_are_not_decoded(monkeypatch):
    decodes: list[int] = []
    real = probe_module.load_pixels

    def counting(*a, **k):
        decodes.append(1)
        return real(*a, **k)

    monkeypatch.setattr(probe_module, "load_pixels", counting)
    for name in ACCEPTED:
        assert probe_image(COLLECTION[name], LIMIT).status == Status.OK
    assert decodes == [], "complete files must be judged from their structure alone"
