"""Reading the files a person hands the opt-out and lineage commands: request files, and the
images named by ``optout add --image``, a request's ``image_files`` and ``lineage --image``.

Those paths come from people, not from a source, so they are not confined to a root; but a FIFO
named ``face.jpg`` must not hang every later ``optout apply`` and ``/dev/zero`` must not fill
memory. The reads go through ingest's contained reader (non-blocking open, ``fstat``, regular
files only, size cap before and while reading) and ingest's probe (pixel limit from the header,
before anything is decoded), so these commands refuse exactly what ingest refuses.
"""

from __future__ import annotations

import os

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import Root, read_contained
from prx_data.ingest.registry import DEFAULT_FORMATS

# Ingest's own defaults (SourceSpec.max_bytes / max_pixels): an opt-out image is a photo someone
# sent, the same kind of file a source holds.
DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 100_000_000
# A request listing 10,000 URLs is about 1 MB of YAML; 16 MB leaves room for bulk requests while
# keeping a runaway file from being parsed.
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

# A person's path may lie anywhere: the root is the whole tree, only the type and size checks bite.
_ANYWHERE = Root(os.sep)


class UnreadableFile(ValueError):
    """A file the command refuses to read, with a message that says why."""


def read_capped_file(path: str | os.PathLike, max_bytes: int, what: str = "file", root: Root = _ANYWHERE) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; raises ``UnreadableFile`` otherwise
    (missing, a FIFO, a device, a directory, too large) without blocking or reading past the cap."""
    data, refused = read_contained(path, root, max_bytes)
    if data is None:
        shown = os.fspath(path)
        error = refused.error if refused is not None else "unreadable"
        raise UnreadableFile(f"{what} refused: {error}" if shown in error else f"{what} {shown} refused: {error}")
    return data


def read_image_file(
    path: str | os.PathLike,
    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> bytes:
    """The bytes of an image file that ingest would accept (type, size, format, pixel count from
    the header); raises ``UnreadableFile`` naming the file and the reason."""
    # Here: the probe's Pillow and libjpeg load only when a request names an image file (the code
    # location imports this module through the request models).
    from prx_data.ingest.rows.image_probe import probe_image

    data = read_capped_file(path, max_bytes, "image file")
    probe = probe_image(data, max_pixels=max_pixels, max_bytes=max_bytes, formats=DEFAULT_FORMATS)
    if probe.status in (Status.INVALID_IMAGE, Status.UNSUPPORTED_FORMAT):
        raise UnreadableFile(f"image file {os.fspath(path)} cannot be decoded: {probe.error}")
    if probe.status != Status.OK:
        raise UnreadableFile(f"image file {os.fspath(path)} is refused: {probe.error}")
    return data


__all__ = [
    "DEFAULT_MAX_IMAGE_BYTES",
    "DEFAULT_MAX_IMAGE_PIXELS",
    "DEFAULT_MAX_REQUEST_BYTES",
    "UnreadableFile",
    "read_capped_file",
    "read_image_file",
]
