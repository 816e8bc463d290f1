"""Which tables exist, and what each can answer (text indexes, embeddings).

Source names come from the data itself (the ``*.lance`` folders under ``<lance root>/sources``,
a folder or an object-store prefix alike); a request can only pick one of those names. A retired
source (its export moved under ``<mds root>/_retired/`` and no exports table since) keeps its raw
table but is not one of them: it is listed apart, as retired.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import lance

from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import Settings
from prx_data.core.storage import exists, join, list_dir, locate
from prx_data.explorer import validate
from prx_data.export.tree import RETIRED_DIR, SOURCE_RE

TEXT_COLUMNS = ("caption", "source_caption")
# Columns every page may show; the image blob and the embedding are read only when needed.
ROW_COLUMNS = (
    "sample_id",
    "source",
    "source_key",
    "image_format",
    "width",
    "height",
    "status",
    "error",
    "source_caption",
    "source_url",
    "license",
    "caption",
    "caption_model",
    "caption_prompt_version",
    "caption_error",
    "label",
    "label_model",
    "label_version",
    "phash",
    "phash_version",
)


@dataclass(frozen=True)
class TableInfo:
    source: str
    ds: lance.LanceDataset
    fts_columns: frozenset[str]  # text columns with an INVERTED index
    has_embedding: bool

    @property
    def columns(self) -> list[str]:
        names = set(self.ds.schema.names)
        return [c for c in ROW_COLUMNS if c in names]


class Catalog:
    def __init__(self, settings: Settings, list_ttl_s: float = 5.0):
        self.settings = settings
        self.paths = StoragePaths.from_settings(settings)
        self.options = settings.storage_options or None
        self._list_ttl_s = list_ttl_s
        self._listed: tuple[float, frozenset[str], frozenset[str]] = (0.0, frozenset(), frozenset())
        self._lock = threading.Lock()

    # Names -------------------------------------------------------------------------------------
    def sources(self) -> frozenset[str]:
        """The sources in the corpus now (retired ones left out)."""
        return self._listing()[0]

    def retired(self) -> frozenset[str]:
        """Sources with a raw table whose export was retired and not made again."""
        return self._listing()[1]

    def _listing(self) -> tuple[frozenset[str], frozenset[str]]:
        with self._lock:
            stamp, names, retired = self._listed
            if time.monotonic() - stamp > self._list_ttl_s:
                found = self._list_sources()
                retired = frozenset(self._list_retired(found))
                names = frozenset(found - retired)
                self._listed = (time.monotonic(), names, retired)
            return names, retired

    def _list_retired(self, names: set[str]) -> set[str]:
        archived = {e.name for e in list_dir(locate(join(self.settings.mds_root, RETIRED_DIR), self.options)) if e.is_dir}
        # Re-added and exported again: an exports table exists once more.
        return {n for n in names & archived if not exists(locate(self.paths.exports_table(n), self.options))}

    def _list_sources(self) -> set[str]:
        # One listing of '<lance root>/sources' (a prefix listing on an object store).
        folder = locate(join(self.settings.lance_root, "sources"), self.options)
        names = set()
        for entry in list_dir(folder):
            name, dot, ext = entry.name.rpartition(".")
            if entry.is_dir and dot and ext == "lance" and SOURCE_RE.fullmatch(name):
                names.add(name)
        return names

    def source(self, value: str) -> str:
        return validate.source(value, self.sources())

    # Tables ------------------------------------------------------------------------------------
    def raw(self, source: str) -> TableInfo | None:
        """The source's raw table at its latest version (opened per request: a stage may have
        committed since the last one)."""
        ds = open_table(self.paths.raw_table(source), self.options)
        if ds is None:
            return None
        names = set(ds.schema.names)
        return TableInfo(source, ds, frozenset(_fts_columns(ds) & names), "embedding" in names)

    def exports(self, source: str) -> lance.LanceDataset | None:
        return open_table(self.paths.exports_table(source), self.options)


def _fts_columns(ds: lance.LanceDataset) -> set[str]:
    found: set[str] = set()
    for index in ds.describe_indices():
        kind = str(getattr(index, "index_type", "")).lower()
        if "inverted" in kind or "fts" in kind:
            found.update(name for name in index.field_names if name in TEXT_COLUMNS)
    return found
