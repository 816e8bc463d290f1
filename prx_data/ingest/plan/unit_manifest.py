"""Which input objects a source's table was read from, by signature: a re-run opens only the
objects that were added or edited since.

One row per input object (an image file with its sidecars, a tar, a Parquet or JSONL file, a
Lance table) in a Lance table beside the source's (``core.paths.unit_manifest_uri``): its
signature (ETag and size on S3, size and mtime elsewhere, the table version of a Lance source),
the run fingerprint it was read under (spec, opt-out requests, this module's code version) and
the sample ids it yielded with their unit piece and position, so an object that is not opened
still counts as seen (removals and duplicate keys are decided as if it had been read).

Only complete objects get a row: one whose unit had a file-level error or a row whose outcome
depends on the world rather than the bytes (a failed download, an unreadable or missing file)
is left out, so the next run reads it again. The manifest is written only after the table
commit, so a killed run can leave an object unrecorded (re-read next time), never recorded
without its rows.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from prx_data.core.lance_io import open_table
from prx_data.core.schema import Status
from prx_data.core.sorted_keys import SortedKeys
from prx_data.core.storage import SIGNATURES_SCHEMA, file_signature, object_signatures
from prx_data.ingest.read.object_store import fixed_prefix
from prx_data.ingest.registry import RegisteredSource

# Bump when what a re-read would produce from the same bytes changes (probe rules, row layout):
# every object is then read again once.
MANIFEST_CODE_VERSION = "units-v2"
# Unit index = object ordinal * PIECES + piece (a JSONL line run, a Parquet row-group run), so an
# object's units keep their order and a kept object's pieces keep their indexes.
PIECES = 1 << 20
# Kept image-folder entries: their keys are relative paths, unique, so their order never matters.
KEPT_FOLDER_UNIT = 1 << 62
# Outcomes that depend on something other than the object's bytes: read again next run.
RETRY_STATUSES = frozenset({Status.DOWNLOAD_FAILED.value, Status.UNREADABLE.value, Status.MISSING.value, Status.REFUSED_ADDRESS.value})

SCHEMA = pa.schema(
    [
        pa.field("object", pa.string(), nullable=False),
        pa.field("signature", pa.string(), nullable=False),
        pa.field("fingerprint", pa.string(), nullable=False),
        pa.field("ids", pa.list_(pa.string())),
        pa.field("pieces", pa.list_(pa.int32())),
        pa.field("positions", pa.list_(pa.int64())),
        pa.field("table_version", pa.int64()),
        pa.field("ingest_run_id", pa.string()),
    ]
)


@dataclass(frozen=True)
class Kept:
    """An object whose signature matches the manifest: not opened this run."""

    index: int  # unit index of its first piece
    object: str


KEPT_SCHEMA = pa.schema([pa.field("object", pa.large_string()), pa.field("index", pa.int64())])


class KeptObjects:
    """The objects a run keeps, with their unit index, as Arrow: an image folder keeps one per
    image, so a Python dict of them would cost ~200 B an image on a re-run of a huge folder."""

    CHUNK = 1024

    def __init__(self) -> None:
        self._objects: list[str] = []
        self._indexes: list[int] = []
        self._batches: list[pa.RecordBatch] = []
        self._rows = 0
        self._index: SortedKeys | None = None

    def add(self, kept: Kept) -> None:
        self._objects.append(kept.object)
        self._indexes.append(kept.index)
        self._rows += 1
        if len(self._objects) >= self.CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self._objects:
            columns = [pa.array(self._objects, pa.large_string()), pa.array(self._indexes, pa.int64())]
            self._batches.append(pa.record_batch(columns, schema=KEPT_SCHEMA))
            self._objects, self._indexes = [], []

    def __len__(self) -> int:
        return self._rows

    def table(self) -> pa.Table:
        self._flush()
        return pa.Table.from_batches(self._batches, schema=KEPT_SCHEMA)

    def index(self) -> SortedKeys:
        """The kept objects sorted once (after the listing: nothing is added then), for both
        :func:`kept_seen` and :meth:`ManifestRows.commit`."""
        if self._index is None or len(self._index) != self._rows:
            self._index = SortedKeys(self.table(), key="object")
        return self._index

    def first_indexes(self) -> dict[int, str]:
        """Unit index -> object, for kept objects read by pieces (files: a few per source)."""
        table = self.table()
        files = table.filter(pc.not_equal(table.column("index"), KEPT_FOLDER_UNIT))
        return dict(zip(files.column("index").to_pylist(), files.column("object").to_pylist()))


def run_fingerprint(source: RegisteredSource, optout) -> str | None:
    """What a kept object's rows were read under; None when no object may be kept: items that
    name other files (``image_kind: path``: those files are not in the signature), or an opt-out
    matcher whose requests cannot be fingerprinted."""
    spec = source.spec
    if spec.shape in ("parquet", "jsonl") and spec.fields.image_kind == "path":
        return None
    requests = ""
    if optout is not None:
        fingerprint = getattr(optout, "fingerprint", None)
        if fingerprint is None:
            return None
        requests = fingerprint
    payload = f"{MANIFEST_CODE_VERSION}|{source.fingerprint}|{requests}"
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


class ChangePlan:
    """The previous run's signatures and this listing's: decides which objects are opened.
    Both are Arrow tables looked up a batch of objects at a time (:class:`SortedKeys`)."""

    def __init__(
        self,
        source: RegisteredSource,
        fingerprint: str,
        previous: SortedKeys | None,
        source_options: dict | None,
        forced: frozenset[str] = frozenset(),
    ) -> None:
        self.source = source
        self.fingerprint = fingerprint
        self.previous = previous  # None: nothing recorded, every object is opened
        self.forced = forced
        self.source_options = source_options
        self._listed: SortedKeys | None = None

    def with_forced(self, objects: Iterable[str]) -> ChangePlan:
        return ChangePlan(self.source, self.fingerprint, self.previous, self.source_options, self.forced | frozenset(objects))

    def signatures(self, paths: list[str]) -> list[str | None]:
        if not self.source.remote:
            return [file_signature(p) for p in paths]
        if self._listed is None:
            # One listing of the source's prefix (ETags included) instead of a request per object.
            listing = object_signatures(fixed_prefix(str(self.source.resolve_location())), self.source_options)
            self._listed = SortedKeys(listing, key="object")
        return self._listed.get(_names(paths), "signature").to_pylist()

    def signature(self, path: str | PurePath) -> str | None:
        return self.signatures([str(path)])[0]

    def folder_signatures(self, images: list[PurePath]) -> list[str | None]:
        """Each image file and its caption sidecars (``.txt``, ``.json``) together."""
        own = self.signatures([str(i) for i in images])
        txt, js = (self.signatures([str(i.with_suffix(s)) for i in images]) for s in (".txt", ".json"))
        return [None if o is None else "|".join([o, t or "-", j or "-"]) for o, t, j in zip(own, txt, js)]

    def lance_signature(self, location: str) -> str | None:
        try:
            ds = lance.dataset(location, storage_options=self.source_options or None)
            # The version alone repeats when a table is deleted and written again: add its time.
            latest = max(ds.versions(), key=lambda v: v["version"])
            return f"lance-version:{ds.version}:{latest['timestamp']}"
        except (OSError, ValueError):
            return None  # the reader reports it

    def unchanged_many(self, objects: list[str], sigs: list[str | None]) -> list[bool]:
        if self.previous is None or not objects:
            return [False] * len(objects)
        before = self.previous.get(_names(objects), "signature").to_pylist()
        return [s is not None and s == b and o not in self.forced for o, s, b in zip(objects, sigs, before)]

    def unchanged(self, obj: str, sig: str | None) -> bool:
        return self.unchanged_many([obj], [sig])[0]


def load_plan(
    manifest_uri: str, options: dict | None, source: RegisteredSource, source_options: dict | None, fingerprint: str | None
) -> ChangePlan | None:
    """None: read every object (no fingerprint). An absent manifest plans to read everything."""
    if fingerprint is None:
        return None
    ds = open_table(manifest_uri, options)
    if ds is None:
        return ChangePlan(source, fingerprint, None, source_options)
    same = []
    for batch in ds.to_batches(columns=["object", "signature", "fingerprint"], batch_size=65536):
        batch = batch.filter(pc.equal(batch.column("fingerprint"), fingerprint))
        same.append(pa.record_batch([batch.column("object").cast(pa.large_string()), batch.column("signature")], schema=SIGNATURES_SCHEMA))
    return ChangePlan(source, fingerprint, SortedKeys(pa.Table.from_batches(same, schema=SIGNATURES_SCHEMA), key="object"), source_options)


def kept_seen(manifest_uri: str, options: dict | None, kept: KeptObjects, seen_schema: pa.Schema) -> Iterable[pa.Table]:
    """(sample_id, unit, pos) of the kept objects' rows, as their last read found them, in
    ``seen_schema`` (``seen_ids.SEEN_SCHEMA``)."""
    ds = open_table(manifest_uri, options)
    if ds is None or not len(kept):
        return
    index = kept.index()
    for batch in ds.to_batches(columns=["object", "ids", "pieces", "positions"], batch_size=4096):
        bases = index.get(batch.column("object"), "index")
        found = pc.is_valid(bases)
        batch, bases = batch.filter(found), bases.filter(found)
        if not batch.num_rows:
            continue
        # One unit per id: the object's first unit plus the id's piece (an image folder's kept
        # entries all share KEPT_FOLDER_UNIT: their keys are unique, their order never matters).
        base = bases.take(pc.list_parent_indices(batch.column("pieces")))
        units = pc.if_else(pc.equal(base, KEPT_FOLDER_UNIT), base, pc.add(base, pc.list_flatten(batch.column("pieces")).cast(pa.int64())))
        yield pa.table([pc.list_flatten(batch.column("ids")), units, pc.list_flatten(batch.column("positions"))], schema=seen_schema)


class ManifestRows:
    """Rows of the objects read this run, spilled to a local Arrow file (one per object)."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self._dir = tempfile.TemporaryDirectory(prefix="prx-units-")
        self.path = os.path.join(self._dir.name, "rows.arrow")
        self._writer: ipc.RecordBatchFileWriter | None = None
        self._incomplete: list[pa.Array] = []  # objects read with an outcome to retry: never recorded

    def add_unit(
        self,
        unit,
        seen: pa.Table,
        statuses: dict,
        file_errors: int,
        member_items: list[int] | None = None,
        incomplete_members: Iterable[int] = (),
    ) -> None:
        """``unit``'s objects with the ids its read found (``seen``: SEEN_SCHEMA). A group of
        files (``unit.files``) says how many items each file gave and which files had an outcome
        to retry: the others are recorded each on its own."""
        objects = unit.objects
        if not objects:
            return
        ids, positions = seen.column("sample_id").to_pylist(), seen.column("pos").to_pylist()
        if unit.files:
            self._add_group(objects, ids, positions, member_items or [0] * len(objects), set(incomplete_members))
            return
        complete = not file_errors and not any(statuses.get(s) for s in RETRY_STATUSES)
        if not complete:
            self._incomplete.append(_names([o for o, _ in objects]))
            return
        if unit.kind == "image_folder":
            by_pos: dict[int, list[tuple[str, int]]] = {}
            for sid, pos in zip(ids, positions):
                by_pos.setdefault(pos, []).append((sid, pos))
            rows = [(obj, sig, by_pos.get(pos, []), 0) for pos, (obj, sig) in enumerate(objects) if sig is not None]
        else:
            obj, sig = objects[0]
            rows = [(obj, sig, list(zip(ids, positions)), unit.index % PIECES)] if sig is not None else []
        self._write(rows)

    def _add_group(self, objects, ids: list, positions: list, member_items: list[int], incomplete: set[int]) -> None:
        # Each file's positions from 0, as when it is read on its own: a kept file's rows are
        # then ordered, and a forced re-read of it skips, the same positions whichever unit read it.
        starts = [0, *itertools.accumulate(member_items)]
        rows, retry = [], []
        for member, (obj, sig) in enumerate(objects):
            if member in incomplete:
                retry.append(obj)
                continue
            if sig is None:
                continue
            lo, hi = starts[member], starts[member + 1]
            first, last = bisect.bisect_left(positions, lo), bisect.bisect_left(positions, hi)
            rows.append((obj, sig, [(sid, pos - lo) for sid, pos in zip(ids[first:last], positions[first:last])], 0))
        if retry:
            self._incomplete.append(_names(retry))
        self._write(rows)

    def _write(self, rows: list) -> None:
        # A name that is not valid UTF-8 cannot be stored as a Lance string: such an object (one
        # invalid_record row) stays unrecorded and is simply read again next run.
        rows = [r for r in rows if _storable(r[0])]
        if not rows:
            return
        table = pa.table(
            {
                "object": [r[0] for r in rows],
                "signature": [r[1] for r in rows],
                "fingerprint": [self.fingerprint] * len(rows),
                "ids": [[s for s, _ in r[2]] for r in rows],
                "pieces": [[r[3]] * len(r[2]) for r in rows],
                "positions": [[p for _, p in r[2]] for r in rows],
                "table_version": pa.nulls(len(rows), pa.int64()),
                "ingest_run_id": pa.nulls(len(rows), pa.string()),
            },
            schema=SCHEMA,
        )
        if self._writer is None:
            self._writer = ipc.new_file(self.path, SCHEMA)
        self._writer.write_table(table)

    def commit(
        self,
        manifest_uri: str,
        options: dict | None,
        kept: KeptObjects,
        dropped: set[str],
        table_version: int,
        run_id: str | None,
    ) -> None:
        """Write the manifest: kept objects' rows as they were, plus this run's. Called only after
        the table commit. An object read in several pieces gets its pieces merged into one row."""
        dropped_all = pa.concat_arrays([pa.array(sorted(dropped), pa.large_string()), *self._incomplete])
        kept_set = kept.index()
        old = open_table(manifest_uri, options)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        fresh = ipc.open_file(pa.memory_map(self.path)).read_all() if os.path.exists(self.path) else SCHEMA.empty_table()
        fresh = _merge_pieces(fresh.filter(pc.invert(pc.is_in(fresh.column("object").cast(pa.large_string()), value_set=dropped_all))))
        n = fresh.num_rows
        fresh = fresh.set_column(6, "table_version", pa.repeat(pa.scalar(table_version, pa.int64()), n)).set_column(
            7, "ingest_run_id", pa.repeat(pa.scalar(run_id, pa.string()), n)
        )

        def batches():
            if old is not None and len(kept_set):
                for batch in old.to_batches(batch_size=4096):
                    objects = batch.column("object")
                    keep = pc.invert(pc.is_in(objects.cast(pa.large_string()), value_set=dropped_all))
                    batch = batch.filter(pc.and_(kept_set.contains(objects), keep))
                    if batch.num_rows:
                        yield pa.RecordBatch.from_arrays(batch.columns, schema=SCHEMA) if batch.schema != SCHEMA else batch
            yield from fresh.to_batches()

        reader = pa.RecordBatchReader.from_batches(SCHEMA, batches())
        lance.write_dataset(reader, manifest_uri, schema=SCHEMA, mode="overwrite", storage_options=options)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._dir.cleanup()


def _merge_pieces(table: pa.Table) -> pa.Table:
    """One row per object: a JSONL or Parquet file read in several units had a row per unit
    (their ids, pieces and positions are concatenated; the order of the triples does not matter).
    Objects read in pieces are files, a few per source: merged one at a time, in Arrow."""
    counts = pc.value_counts(table.column("object"))
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    if not len(repeated):
        return table
    parts = [table.filter(pc.invert(pc.is_in(table.column("object"), value_set=repeated)))]
    for obj in repeated.to_pylist():
        rows = table.filter(pc.equal(table.column("object"), obj))
        merged = {name: rows.column(name).slice(0, 1) for name in SCHEMA.names}
        for name in ("ids", "pieces", "positions"):
            flat = pc.list_flatten(rows.column(name)).combine_chunks()
            merged[name] = pa.chunked_array([pa.ListArray.from_arrays(pa.array([0, len(flat)], pa.int32()), flat)])
        parts.append(pa.table(merged, schema=SCHEMA))
    return pa.concat_tables(parts)


def _names(names: list[str]) -> pa.Array:
    """Object names as Arrow strings; a name that is not valid UTF-8 (never stored: see
    ``_storable``) becomes null, which matches nothing."""
    try:
        return pa.array(names, pa.large_string())
    except UnicodeEncodeError:
        return pa.array([n if _storable(n) else None for n in names], pa.large_string())


def _storable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
