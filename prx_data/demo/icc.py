"""ICC profiles built from their definitions, and photos converted into them: for the demo corpus,
the tests and the benchmarks, with no profile file fetched or shipped.

Pillow builds only sRGB, LAB and XYZ profiles itself, so the Display P3 and Adobe RGB (1998)
profiles a corpus meets are written here as ICC v2 matrix/TRC display profiles (the structure
every such embedded profile has), and a small CMYK input profile as a 16-bit lookup table
(``mft2``).

The CMYK model: linear light R = (1 - C')(1 - K'), where C' = 1 - (1 - C)^2.2 comes from the
profile's input curves, likewise G from M and B from Y; a 17-point table holds it (LittleCMS's
own resampling of the transform keeps a round trip within about 0.2 levels on average). A photo
is put into it by :func:`to_cmyk`, the model's exact inverse, so a converted photo differs from
its original only by 8-bit rounding, the table, and JPEG coding.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageCms

from prx_data.imaging.colour import ADOBE_RGB, D50_XYZ, DISPLAY_P3, PRIMARIES, colorants

# The sRGB transfer function (also Display P3's), as a 1024-entry curve.
_CURVE_POINTS = 1024
ADOBE_GAMMA = 563 / 256  # 2.19921875, as Adobe RGB (1998) profiles store it (u8Fixed8)
CMYK_GAMMA = 2.2


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz_tag(xyz: Sequence[float]) -> bytes:
    return b"XYZ \0\0\0\0" + b"".join(_s15(v) for v in xyz)


def _text_tag(text: str) -> bytes:
    return b"text\0\0\0\0" + text.encode("ascii") + b"\0"


def _desc_tag(text: str) -> bytes:
    ascii_ = text.encode("ascii") + b"\0"
    return (
        b"desc\0\0\0\0"
        + struct.pack(">I", len(ascii_))
        + ascii_
        + struct.pack(">II", 0, 0)  # no Unicode description
        + struct.pack(">HB", 0, 0)  # no ScriptCode description
        + b"\0" * 67
    )


def _gamma_curve(gamma: float) -> bytes:
    return b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256))


def _srgb_curve() -> bytes:
    x = np.linspace(0.0, 1.0, _CURVE_POINTS)
    linear = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    values = np.round(linear * 65535).astype(">u2")
    return b"curv\0\0\0\0" + struct.pack(">I", _CURVE_POINTS) + values.tobytes()


def _profile(device_class: bytes, colour_space: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    """An ICC v2.1 profile: header, tag table, tag data (each 4-byte aligned)."""
    table_size = 4 + 12 * len(tags)
    offset = 128 + table_size
    entries, data = [], b""
    for signature, payload in tags:
        pad = (-len(payload)) % 4
        entries.append(struct.pack(">4sII", signature, offset + len(data), len(payload)))
        data += payload + b"\0" * pad
    size = offset + len(data)
    header = (
        struct.pack(">I", size)
        + b"\0\0\0\0"  # preferred CMM: none
        + struct.pack(">I", 0x02100000)
        + device_class
        + colour_space
        + b"XYZ "
        + struct.pack(">6H", 2024, 1, 1, 0, 0, 0)
        + b"acsp"
        + b"\0" * 4  # platform
        + b"\0" * 4  # flags
        + b"\0" * 8  # manufacturer, model
        + b"\0" * 8  # attributes
        + struct.pack(">I", 0)  # perceptual
        + b"".join(_s15(v) for v in D50_XYZ)
        + b"\0" * 4  # creator
        + b"\0" * 44  # profile id (v4 only) and reserved
    )
    assert len(header) == 128
    return header + struct.pack(">I", len(tags)) + b"".join(entries) + data


def matrix_profile(description: str, primaries: Sequence[tuple[float, float]], curve: bytes) -> bytes:
    """An RGB display profile from the primaries' chromaticities (D65 white) and one tone curve."""
    red, green, blue = colorants(tuple(primaries))
    return _profile(
        b"mntr",
        b"RGB ",
        [
            (b"desc", _desc_tag(description)),
            (b"cprt", _text_tag("No copyright, use freely")),
            (b"wtpt", _xyz_tag(D50_XYZ)),
            (b"rXYZ", _xyz_tag(red)),
            (b"gXYZ", _xyz_tag(green)),
            (b"bXYZ", _xyz_tag(blue)),
            (b"rTRC", curve),
            (b"gTRC", curve),
            (b"bTRC", curve),
        ],
    )


def display_p3_profile() -> bytes:
    return matrix_profile("Display P3", PRIMARIES[DISPLAY_P3], _srgb_curve())


def adobe_rgb_profile() -> bytes:
    return matrix_profile("Adobe RGB (1998)", PRIMARIES[ADOBE_RGB], _gamma_curve(ADOBE_GAMMA))


def _srgb_to_xyz_d50() -> np.ndarray:
    from prx_data.imaging.colour import SRGB

    return colorants(PRIMARIES[SRGB]).T  # columns: XYZ of linear R, G, B


def cmyk_profile(description: str = "prx test CMYK", grid: int = 17) -> bytes:
    """A CMYK input profile (A2B0 only) of the model in the module docstring."""
    n_in = 256
    x = np.linspace(0.0, 1.0, n_in)
    input_curve = np.round((1.0 - (1.0 - x) ** CMYK_GAMMA) * 65535).astype(">u2").tobytes()
    g = np.linspace(0.0, 1.0, grid)
    c, m, y, k = np.meshgrid(g, g, g, g, indexing="ij")  # first input channel varies slowest
    linear = np.stack([(1 - c) * (1 - k), (1 - m) * (1 - k), (1 - y) * (1 - k)], axis=-1)
    xyz = linear @ _srgb_to_xyz_d50().T
    # PCS XYZ in a v2 16-bit table: 1.0 is 0x8000.
    clut = np.round(np.clip(xyz, 0, 65535 / 32768) * 32768).astype(">u2").tobytes()
    identity = np.round(np.linspace(0, 65535, 2)).astype(">u2").tobytes()
    mft2 = (
        b"mft2\0\0\0\0"
        + struct.pack(">BBBB", 4, 3, grid, 0)
        + b"".join(_s15(v) for v in (1, 0, 0, 0, 1, 0, 0, 0, 1))
        + struct.pack(">HH", n_in, 2)
        + input_curve * 4
        + clut
        + identity * 3
    )
    return _profile(
        b"scnr",
        b"CMYK",
        [
            (b"desc", _desc_tag(description)),
            (b"cprt", _text_tag("No copyright, use freely")),
            (b"wtpt", _xyz_tag(D50_XYZ)),
            (b"A2B0", mft2),
        ],
    )


def to_cmyk(image: Image.Image) -> Image.Image:
    """An sRGB photo as CMYK pixels of :func:`cmyk_profile`'s model (grey component replaced
    by K), so that converting them back through the profile gives the photo again."""
    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    # (1 - C)(1 - K) = R_lin ** (1 / gamma), and likewise for M, Y.
    encoded = linear ** (1.0 / CMYK_GAMMA)
    white = encoded.max(axis=-1, keepdims=True)
    k = 1.0 - white
    cmy = 1.0 - np.divide(encoded, white, out=np.ones_like(encoded), where=white > 0)
    cmyk = np.concatenate([cmy, k], axis=-1)
    return Image.fromarray(np.round(cmyk * 255).astype(np.uint8), "CMYK")


def convert_photo(image: Image.Image, profile: bytes) -> Image.Image:
    """An sRGB photo converted by LittleCMS into an RGB ``profile``'s space (relative
    colorimetric), the profile attached for saving (``image.info['icc_profile']``)."""
    target = ImageCms.ImageCmsProfile(io.BytesIO(profile))
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))
    out = ImageCms.profileToProfile(
        image.convert("RGB"), srgb, target, renderingIntent=ImageCms.Intent.RELATIVE_COLORIMETRIC, outputMode="RGB"
    )
    assert out is not None
    out.info["icc_profile"] = profile
    return out


def encode_with_profile(image: Image.Image, profile: bytes, format: str = "JPEG", quality: int = 95) -> bytes:
    """``image`` encoded with ``profile`` embedded (JPEG APP2, PNG iCCP, WebP ICCP, TIFF tag)."""
    buffer = io.BytesIO()
    options: dict = {"icc_profile": profile}
    if format in ("JPEG", "WEBP"):
        options["quality"] = quality
    if format == "JPEG":
        options["subsampling"] = "4:4:4"
    image.save(buffer, format=format, **options)
    return buffer.getvalue()
