import pytest

from prx_data.core.schema import Status
from prx_data.ingest.rows.image_probe import probe_image
from prx_data_tests import images

LIMIT = 100_000_000


@pytest.mark.parametrize(
    "data, status, fragment",
    [
        (b"", Status.INVALID_IMAGE, "empty file"),
        (images.truncated_jpeg(), Status.INVALID_IMAGE, "truncated JPEG"),
        (b"this is plain text, not a JPEG\n" * 10, Status.INVALID_IMAGE, "not a recognised image"),
        (None, Status.MISSING, "no image data"),
    ],
)
def test_bad_bytes_get_a_status_and_reason(data, status, fragment):
    probe = probe_image(data, LIMIT)
    assert probe.status == status
    assert probe.error is not None
    assert fragment in probe.error


def test_decompression_bomb_is_too_large_without_decoding():
    data = images.decompression_bomb(12_000)
    assert len(data) < 200_000
    probe = probe_image(data, max_pixels=100_000_000)
    assert probe.status == Status.TOO_LARGE
    assert probe.error is not None
    assert "144000000 pixels exceeds" in probe.error
    assert (probe.width, probe.height) == (12_000, 12_000)


def test_byte_limit():
    probe = probe_image(images.jpeg(), LIMIT, max_bytes=1000)
    assert probe.error is not None
    assert probe.status == Status.TOO_LARGE and "bytes exceeds" in probe.error


def test_exif_rotation_reports_displayed_size():
    probe = probe_image(images.exif_rotated_jpeg(640, 480), LIMIT)
    assert probe.status == Status.OK
    assert (probe.width, probe.height) == (480, 640)


@pytest.mark.parametrize(
    "data, fmt, size",
    [
        (images.cmyk_jpeg(), "JPEG", (400, 300)),
        (images.png16(), "PNG", (400, 300)),
        (images.palette_png_with_transparency(), "PNG", (320, 240)),
        (images.animated_gif(), "GIF", (200, 150)),
    ],
)
def test_awkward_but_valid_images_are_ok(data, fmt, size):
    probe = probe_image(data, LIMIT)
    assert probe.status == Status.OK, probe.error
    assert probe.image_format == fmt
    assert (probe.width, probe.height) == size
    assert probe.sha256 is not None
    assert len(probe.sha256) == 64
