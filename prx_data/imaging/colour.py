"""Source colour spaces: what an image's embedded ICC profile says, and its pixels in sRGB.

Models are trained on sRGB pixels, and an exported JPEG carries no profile (an untagged image
means sRGB everywhere it is read), so an image tagged with another profile (Display P3 from
phones, Adobe RGB from cameras, CMYK from print) is converted through its profile by LittleCMS
(Pillow's ``ImageCms``) before it is resized. Intent: relative colorimetric with black-point
compensation. Almost every embedded RGB profile is a matrix/TRC profile, which has no perceptual
table (LittleCMS would fall back to colorimetric anyway); relative colorimetric keeps every colour
sRGB can show exactly where the photo put it and clips only the few outside the sRGB gamut,
instead of desaturating the whole image to make room for them. Black-point compensation maps a
print profile's black (CMYK) onto sRGB black, so blacks are not washed out; for RGB profiles both
blacks are zero and it changes nothing.

A profile is identified once per distinct profile (the bytes repeat across a corpus): one whose
transform to sRGB is the identity within two 8-bit levels is ``srgb`` and its pixels are left as
decoded (the export's YCbCr fast path keeps working for it). A profile that does not parse, or
that does not fit the image's mode (a CMYK profile on an RGB image), is ``invalid-profile``: it is
recorded with the reason and the image is treated as sRGB, never dropped.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np
from PIL import Image, ImageCms

SRGB: Final = "srgb"
DISPLAY_P3: Final = "display-p3"
ADOBE_RGB: Final = "adobe-rgb"
NONE: Final = "none"  # no embedded profile: sRGB by convention
INVALID: Final = "invalid-profile"
OTHER_PREFIX: Final = "other:"
# Names every space whose pixels are written as decoded: the export's bytes for them are those of
# older code, so only the other rows are re-exported when the conversion is introduced or changes.
AS_DECODED: Final = frozenset({SRGB, NONE, INVALID})

# Bump when the conversion changes the pixels of converted images (intent, flags, engine use).
COLOUR_VERSION: Final = "icc-relcol-bpc-v1"
INTENT: Final = ImageCms.Intent.RELATIVE_COLORIMETRIC
# NOCACHE: a transform is built once per profile and shared (``_identify``); LittleCMS's
# one-pixel cache is the part of a transform that threads sharing it would race on, and it
# saves nothing measurable on photos (15.3 against 15.6 ms per megapixel).
FLAGS: Final = ImageCms.Flags.BLACKPOINTCOMPENSATION | ImageCms.Flags.NOCACHE

# Chromaticities (x, y) of red, green, blue, and the white point, of the spaces named here.
D65: Final = (0.3127, 0.3290)
D50_XYZ: Final = (0.9642, 1.0, 0.8249)
PRIMARIES: Final = {
    SRGB: ((0.64, 0.33), (0.30, 0.60), (0.15, 0.06)),
    DISPLAY_P3: ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060)),
    ADOBE_RGB: ((0.64, 0.33), (0.21, 0.71), (0.15, 0.06)),
}
# Largest difference of a colorant's XYZ (D50) from the reference that still names the space;
# the three spaces differ by 0.05 or more in some colorant.
_COLORANT_TOLERANCE: Final = 0.004
# An "srgb" profile's transform may move no 8-bit value by more than this.
_IDENTITY_LEVELS: Final = 2
_DESCRIPTION_CHARS: Final = 80

# What image modes a profile of each ICC colour space applies to, and the mode it converts from.
_PROFILE_MODES: Final = {
    "RGB": ("RGB", frozenset({"RGB", "RGBA", "RGBX", "P", "PA", "I;16", "I;16B", "I;16L", "I;16N", "I", "F"})),
    "CMYK": ("CMYK", frozenset({"CMYK"})),
    "GRAY": ("L", frozenset({"L", "LA", "La", "1", "I;16", "I;16B", "I;16L", "I;16N", "I", "F"})),
}

_BRADFORD: Final = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])


def _xyz(xy: tuple[float, float]) -> np.ndarray:
    x, y = xy
    return np.array([x / y, 1.0, (1 - x - y) / y])


def colorants(primaries: tuple[tuple[float, float], ...], white: tuple[float, float] = D65) -> np.ndarray:
    """The D50-adapted (Bradford) XYZ of each primary, as an ICC profile's rXYZ/gXYZ/bXYZ tags
    hold them: row i is primary i. Rows add up to the D50 white."""
    columns = np.stack([_xyz(p) for p in primaries], axis=1)
    scale = np.linalg.solve(columns, _xyz(white))
    to_xyz = columns * scale  # RGB -> XYZ under the space's own white
    cone_src, cone_dst = _BRADFORD @ _xyz(white), _BRADFORD @ np.array(D50_XYZ)
    adapt = np.linalg.inv(_BRADFORD) @ np.diag(cone_dst / cone_src) @ _BRADFORD
    return np.asarray((adapt @ to_xyz).T)


_REFERENCES: Final = {name: colorants(p) for name, p in PRIMARIES.items()}


@dataclass(frozen=True)
class SourceColour:
    """An image's colour space, and the transform that takes its pixels to sRGB (None: none
    needed or none possible)."""

    space: str
    error: str | None = None
    transform: ImageCms.ImageCmsTransform | None = None
    mode: str | None = None  # the pixel mode the transform takes

    @property
    def converts(self) -> bool:
        return self.transform is not None

    def to_srgb(self, image: Image.Image) -> Image.Image:
        """``image`` (in :attr:`mode`) as sRGB RGB pixels; unchanged without a transform."""
        if self.transform is None:
            return image
        if image.mode != self.mode:
            raise ValueError(f"image of mode {image.mode} for a transform from {self.mode}")
        return self.transform.apply(image)


NO_PROFILE: Final = SourceColour(NONE)


def identify(image: Image.Image) -> SourceColour:
    """The colour space of an opened (not necessarily decoded) image, from its ICC profile
    (JPEG APP2, PNG iCCP, WebP ICCP, TIFF tag 34675 all land in ``info['icc_profile']``)."""
    icc = image.info.get("icc_profile")
    if not icc:
        return NO_PROFILE
    return _identify(bytes(icc), image.mode)


# Keyed by the profile's bytes (a CMYK profile can be ~1 MB): a corpus holds few distinct ones.
@lru_cache(maxsize=32)
def _identify(icc: bytes, mode: str) -> SourceColour:
    try:
        profile = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        core = profile.profile
        kind = (core.xcolor_space or "").strip()
        description = _description(core)
    except Exception as exc:  # PyCMSError, OSError, TypeError from a malformed profile
        return SourceColour(INVALID, f"ICC profile does not parse: {type(exc).__name__}: {exc}"[:300])
    if kind not in _PROFILE_MODES:
        return SourceColour(INVALID, f"ICC profile for colour space {kind or '?'!r} ({description}) cannot be converted to sRGB")
    in_mode, accepted = _PROFILE_MODES[kind]
    if mode not in accepted:
        return SourceColour(INVALID, f"{kind} ICC profile ({description}) on an image of mode {mode}")
    try:
        transform = ImageCms.buildTransform(profile, _srgb(), in_mode, "RGB", renderingIntent=INTENT, flags=FLAGS)
    except Exception as exc:
        return SourceColour(INVALID, f"ICC profile ({description}) gives no transform to sRGB: {type(exc).__name__}: {exc}"[:300])
    if in_mode == "RGB" and _is_identity(transform):
        return SourceColour(SRGB)
    return SourceColour(_name(core, kind, description), None, transform, in_mode)


def _description(core) -> str:
    text = core.profile_description or core.product_description or core.model or ""
    text = " ".join(str(text).split())[:_DESCRIPTION_CHARS]
    return text or "unnamed"


def _name(core, kind: str, description: str) -> str:
    if kind == "RGB":
        try:
            found = np.array([core.red_colorant[0], core.green_colorant[0], core.blue_colorant[0]], dtype=np.float64)
        except (TypeError, IndexError):  # a LUT-based RGB profile has no colorant tags
            found = None
        if found is not None:
            for name, reference in _REFERENCES.items():
                if name != SRGB and np.abs(found - reference).max() <= _COLORANT_TOLERANCE:
                    return name
    return OTHER_PREFIX + description


@lru_cache(maxsize=1)
def _srgb() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


@lru_cache(maxsize=1)
def _probe_image() -> Image.Image:
    """Every grey level, ramps of each primary and secondary, and a spread of mixed colours."""
    levels = np.arange(256, dtype=np.uint8)
    zero = np.zeros(256, dtype=np.uint8)
    rows = [np.stack([levels, levels, levels], axis=1)]
    for mask in ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (0, 1, 1), (1, 0, 1)):
        rows.append(np.stack([levels if m else zero for m in mask], axis=1))
    mixed = np.random.default_rng(0).integers(0, 256, size=(256, 3), dtype=np.uint8)
    rows.append(mixed)
    return Image.fromarray(np.stack(rows, axis=0), "RGB")


def _is_identity(transform: ImageCms.ImageCmsTransform) -> bool:
    probe = _probe_image()
    out = transform.apply(probe)
    diff = np.abs(np.asarray(out, dtype=np.int16) - np.asarray(probe, dtype=np.int16))
    return int(diff.max()) <= _IDENTITY_LEVELS


def needs_conversion(space: str | None) -> bool:
    """Whether rows recorded with ``space`` are exported through a colour conversion (a null
    space is not known yet: such rows keep what they had)."""
    return space is not None and space not in AS_DECODED
