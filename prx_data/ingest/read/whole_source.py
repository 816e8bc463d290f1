"""A whole source read in one stream, by its shape (what the units of a source read piece by
piece, for checks and tools that want every item at once)."""

from __future__ import annotations

from collections.abc import Iterator

from prx_data.ingest.read.image_folder import read_image_folder
from prx_data.ingest.read.jsonl import read_jsonl
from prx_data.ingest.read.lance_table import read_lance
from prx_data.ingest.read.parquet import read_parquet
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.source_files import make_root
from prx_data.ingest.read.webdataset import read_webdataset
from prx_data.ingest.registry import RegisteredSource

READERS = {
    "image_folder": read_image_folder,
    "parquet": read_parquet,
    "jsonl": read_jsonl,
    "webdataset": read_webdataset,
    "lance": read_lance,
}


def read_source(source: RegisteredSource, storage_options: dict | None = None) -> Iterator[RawItem]:
    """Every item of ``source``; ``storage_options`` reach an object-store location."""
    location = source.resolve_location()
    root = make_root(source.spec, location, source.resolve_root(), storage_options)
    return READERS[source.spec.shape](source.spec, location, root, storage_options)
