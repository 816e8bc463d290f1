"""Reading sources: turn a source of any supported shape into a stream of ``RawItem``.

One module per shape (``image_folder``, ``parquet``, ``jsonl``, ``webdataset``, ``lance_table``);
the rest of ingest reads through ``units`` (a unit of a source, and ``read_unit``) and the shape
modules' public listing helpers, never a reader's private names.

Every reader is a generator, so memory stays flat however large the source. Sources are
hostile until proven otherwise (see ``docs/security.md``):

- every item found becomes exactly one item here, good or not: a problem with one record
  (missing or unreadable file, a value of the wrong type, a sidecar that is not UTF-8) is an
  item with ``error`` set, and a file that cannot be read at all is one item for that file
  (``file_level``), while the other files' records are still read;
- every path (image files, ``image_kind: path``, sidecars, symlink targets, matched files) is
  read through :mod:`prx_data.ingest.read.contained` (an object store through
  ``object_store``), so nothing outside the source's root is read;
- every read is capped while streaming (files, tar members, JSONL lines).

Only a source that cannot be opened at all raises ``SourceUnavailable``.
"""
