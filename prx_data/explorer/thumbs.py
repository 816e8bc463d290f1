"""Small JPEGs made from a sample's image blob, for the grid and the sample page.

The stored bytes are never sent as they are: whatever a source put in the blob column, the
browser only gets a JPEG that this module encoded, decoded through the project's one decode
path (format allow-list, pixel limit before decoding, EXIF orientation) at a reduced DCT scale.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict

import lance
from PIL import Image

from prx_data.explorer import validate
from prx_data.imaging.decode import DEFAULT_MAX_PIXELS, DecodeError, load_pixels, read_header

SIZES = {"thumb": 256, "preview": 1024}
JPEG_QUALITY = 82


def read_image(ds: lance.LanceDataset, sample_id: str) -> tuple[bool, bytes | None]:
    """(the row exists, its image bytes or None)."""
    rows = ds.to_table(columns=["sample_id"], filter=f"sample_id = {validate.sql_string(sample_id)}", with_row_address=True)
    if rows.num_rows == 0:
        return False, None
    address = rows.column("_rowaddr")[0].as_py()
    [(_, data)] = ds.read_blobs("image", addresses=[address], preserve_order=True)
    return True, data


def render(data: bytes, side: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> bytes:
    """A JPEG whose longer side is at most ``side``. Raises ``DecodeError``."""
    header = read_header(data, max_pixels)
    scale = max(header.width, header.height) / side
    # Decode at the smallest DCT scale that still leaves `side` pixels on the longer side.
    request = (max(1, int(header.width / scale)), max(1, int(header.height / scale))) if scale > 1 else None
    image = load_pixels(header, "RGB", request)
    image.thumbnail((side, side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=True)
    return out.getvalue()


class ThumbnailCache:
    """Rendered JPEGs keyed by table version: a new commit can change a row's image."""

    def __init__(self, capacity: int = 512):
        self._items: OrderedDict[tuple, bytes | None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, ds: lance.LanceDataset, sample_id: str, side: int) -> bytes | None:
        """The JPEG, or None when the image cannot be decoded. Raises ``NotFound``."""
        key = (ds.uri, ds.version, sample_id, side)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        exists, data = read_image(ds, sample_id)
        if not exists:
            raise validate.NotFound(f"no sample {sample_id}")
        try:
            jpeg = render(data, side) if data else None
        except DecodeError:
            jpeg = None
        with self._lock:
            self._items[key] = jpeg
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return jpeg


def placeholder_svg(side: int, text: str = "no preview") -> bytes:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side}" viewBox="0 0 {side} {side}">'
        f'<rect width="100%" height="100%" fill="#e5e7eb"/>'
        f'<text x="50%" y="50%" text-anchor="middle" dominant-baseline="middle" font-family="sans-serif" '
        f'font-size="{max(10, side // 12)}" fill="#6b7280">{text}</text></svg>'
    ).encode()
