"""Colour spaces from embedded ICC profiles, in every container that carries one, and the sRGB
conversion ``transform.prepare`` applies (the end-to-end export is
``prx_data_tests/export/test_colour_export.py``)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageCms
from skimage import data as skdata
from skimage.color import deltaE_ciede2000, rgb2lab

from prx_data.demo import icc
from prx_data.imaging.colour import ADOBE_RGB, DISPLAY_P3, INVALID, NONE, SRGB, colorants, identify, needs_conversion
from prx_data.imaging.decode import open_for_hash
from prx_data.imaging.phash import phash_row
from prx_data.imaging.transform import Prepared, prepare


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.fromarray(skdata.chelsea()).convert("RGB").resize((640, 480), Image.Resampling.LANCZOS)


def _space(data: bytes) -> str:
    return identify(Image.open(io.BytesIO(data))).space


def _delta_e(a: Prepared, b: Prepared) -> float:
    def lab(p: Prepared) -> np.ndarray:
        return rgb2lab(np.asarray(Image.open(io.BytesIO(p.jpeg)).convert("RGB"), dtype=np.float64) / 255.0)

    return float(deltaE_ciede2000(lab(a), lab(b)).mean())


def _prepared(data: bytes) -> Prepared:
    out = prepare(data)
    assert isinstance(out, Prepared), out
    return out


def test_colorants_are_the_published_d50_values():
    # sRGB's rXYZ/gXYZ/bXYZ as the IEC 61966-2-1 profiles store them (Bradford-adapted to D50).
    srgb = colorants(((0.64, 0.33), (0.30, 0.60), (0.15, 0.06)))
    assert np.allclose(srgb, [[0.4361, 0.2225, 0.0139], [0.3851, 0.7169, 0.0971], [0.1431, 0.0606, 0.7139]], atol=2e-4)
    assert np.allclose(srgb.sum(axis=0), [0.9642, 1.0, 0.8249], atol=1e-4)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_every_container_carries_its_profile_to_srgb(photo, fmt):
    p3 = icc.display_p3_profile()
    tagged = icc.encode_with_profile(icc.convert_photo(photo, p3), p3, fmt)
    assert _space(tagged) == DISPLAY_P3
    original = _prepared(icc.encode_with_profile(photo, ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes(), fmt))
    converted = _prepared(tagged)
    assert (converted.height, converted.width) == (original.height, original.width)
    assert _delta_e(converted, original) < 1.5


def test_names_of_profiles(photo):
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG")
    assert _space(buffer.getvalue()) == NONE
    assert _space(icc.encode_with_profile(photo, srgb)) == SRGB
    assert _space(icc.encode_with_profile(photo, icc.adobe_rgb_profile())) == ADOBE_RGB
    # A matrix profile of no named space is named by its description, and converted.
    wide = icc.matrix_profile("Wide  Gamut\nTest", ((0.7347, 0.2653), (0.1152, 0.8264), (0.1566, 0.0177)), icc._gamma_curve(2.2))
    assert _space(icc.encode_with_profile(photo, wide)) == "other:Wide Gamut Test"
    assert needs_conversion("other:Wide Gamut Test") and needs_conversion(DISPLAY_P3)
    assert not any(needs_conversion(s) for s in (SRGB, NONE, INVALID, None))


def test_unusable_profiles_are_recorded_and_the_image_used_as_srgb(photo):
    plain = io.BytesIO()
    photo.save(plain, "JPEG", quality=95)
    baseline = _prepared(plain.getvalue())
    for profile, reason in ((b"garbage, not a profile", "does not parse"), (icc.cmyk_profile(), "CMYK ICC profile")):
        data = io.BytesIO()
        photo.save(data, "JPEG", quality=95, icc_profile=profile)
        colour = identify(Image.open(io.BytesIO(data.getvalue())))
        assert colour.space == INVALID and reason in (colour.error or ""), colour
        assert _prepared(data.getvalue()).jpeg == baseline.jpeg, "the pixels are exported as decoded"


def test_fast_path_and_hash_are_unchanged(photo):
    """No profile or an sRGB one: the bytes older code exported. The perceptual hash reads the
    file's own grey, never the converted pixels: its bits (and PHASH_VERSION) stay as they were."""
    plain = io.BytesIO()
    photo.save(plain, "JPEG", quality=95)
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    tagged = io.BytesIO()
    photo.save(tagged, "JPEG", quality=95, icc_profile=srgb)
    assert _prepared(tagged.getvalue()).jpeg == _prepared(plain.getvalue()).jpeg
    p3 = icc.display_p3_profile()
    in_p3 = icc.encode_with_profile(icc.convert_photo(photo, p3), p3)
    assert np.array_equal(np.asarray(open_for_hash(in_p3)[0]), np.asarray(open_for_hash(_same_pixels_without_profile(in_p3))[0]))
    assert phash_row(in_p3)["phash"] == phash_row(_same_pixels_without_profile(in_p3))["phash"]


def _same_pixels_without_profile(data: bytes) -> bytes:
    """The JPEG with its APP2 ICC segments cut out: the same coded pixels, no profile."""
    out, i = bytearray(data[:2]), 2
    while i < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        if marker == 0xDA:  # start of scan: the rest is entropy-coded data
            out += data[i:]
            break
        if not (marker == 0xE2 and data[i + 4 : i + 16] == b"ICC_PROFILE\0"):
            out += data[i : i + 2 + length]
        i += 2 + length
    assert identify(Image.open(io.BytesIO(bytes(out)))).space == NONE
    return bytes(out)
