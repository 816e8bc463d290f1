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

import hashlib
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
from prx_data.core.storage import file_signature, object_signatures
from prx_data.ingest.object_source import fixed_prefix
from prx_data.ingest.registry import RegisteredSource

# Bump when what a re-read would produce from the same bytes changes (probe rules, row layout):
# every object is then read again once.
MANIFEST_CODE_VERSION = "units-v1"
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
    """The previous run's signatures and this listing's: decides which objects are opened."""

    def __init__(
        self,
        source: RegisteredSource,
        fingerprint: str,
        previous: dict[str, str],
        source_options: dict | None,
        forced: frozenset[str] = frozenset(),
    ) -> None:
        self.source = source
        self.fingerprint = fingerprint
        self.previous = previous
        self.forced = forced
        self.source_options = source_options
        self._listed: dict[str, str] | None = None

    def with_forced(self, objects: Iterable[str]) -> ChangePlan:
        return ChangePlan(self.source, self.fingerprint, self.previous, self.source_options, self.forced | frozenset(objects))

    def signature(self, path: str | PurePath) -> str | None:
        if not self.source.remote:
            return file_signature(str(path))
        if self._listed is None:
            # One listing of the source's prefix (ETags included) instead of a request per object.
            self._listed = object_signatures(fixed_prefix(str(self.source.resolve_location())), self.source_options)
        return self._listed.get(str(path))

    def folder_signature(self, image: PurePath) -> str | None:
        """An image file and its caption sidecars (``.txt``, ``.json``) together."""
        own = self.signature(image)
        if own is None:
            return None
        return "|".join([own, *(self.signature(image.with_suffix(s)) or "-" for s in (".txt", ".json"))])

    def lance_signature(self, location: str) -> str | None:
        try:
            ds = lance.dataset(location, storage_options=self.source_options or None)
            # The version alone repeats when a table is deleted and written again: add its time.
            latest = max(ds.versions(), key=lambda v: v["version"])
            return f"lance-version:{ds.version}:{latest['timestamp']}"
        except (OSError, ValueError):
            return None  # the reader reports it

    def unchanged(self, obj: str, sig: str | None) -> bool:
        return sig is not None and obj not in self.forced and self.previous.get(obj) == sig


def load_plan(
    manifest_uri: str, options: dict | None, source: RegisteredSource, source_options: dict | None, fingerprint: str | None
) -> ChangePlan | None:
    """None: read every object (no fingerprint). An absent manifest plans to read everything."""
    if fingerprint is None:
        return None
    previous: dict[str, str] = {}
    ds = open_table(manifest_uri, options)
    if ds is not None:
        for batch in ds.to_batches(columns=["object", "signature", "fingerprint"], batch_size=65536):
            same = batch.filter(pc.equal(batch.column("fingerprint"), fingerprint))
            previous.update(zip(same.column("object").to_pylist(), same.column("signature").to_pylist()))
    return ChangePlan(source, fingerprint, previous, source_options)


def kept_seen(manifest_uri: str, options: dict | None, kept: dict[str, int], seen_schema: pa.Schema) -> Iterable[pa.Table]:
    """(sample_id, unit, pos) of the kept objects' rows, as their last read found them, in
    ``seen_schema`` (changes.SEEN_SCHEMA: passed in, as changes imports this module's users)."""
    ds = open_table(manifest_uri, options)
    if ds is None or not kept:
        return
    wanted = pa.array(list(kept), pa.string())
    for batch in ds.to_batches(columns=["object", "ids", "pieces", "positions"], batch_size=4096):
        batch = batch.filter(pc.is_in(batch.column("object"), value_set=wanted))
        if not batch.num_rows:
            continue
        lengths = pc.list_value_length(batch.column("ids")).to_pylist()
        bases = [kept[o] for o in batch.column("object").to_pylist()]
        units = pa.array(
            [b + (p if b != KEPT_FOLDER_UNIT else 0) for b, n, ps in zip(bases, lengths, batch.column("pieces").to_pylist()) for p in ps],
            pa.int64(),
        )
        yield pa.table([pc.list_flatten(batch.column("ids")), units, pc.list_flatten(batch.column("positions"))], schema=seen_schema)


class ManifestRows:
    """Rows of the objects read this run, spilled to a local Arrow file (one per object)."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint
        self._dir = tempfile.TemporaryDirectory(prefix="prx-units-")
        self.path = os.path.join(self._dir.name, "rows.arrow")
        self._writer: ipc.RecordBatchFileWriter | None = None
        self.objects: set[str] = set()  # read this run, recorded or not
        self.incomplete: set[str] = set()  # read with an outcome to retry: never recorded

    def add_unit(self, unit, seen: pa.Table, statuses: dict, file_errors: int) -> None:
        """``unit``'s objects with the ids its read found (``seen``: SEEN_SCHEMA)."""
        objects = unit.objects
        if not objects:
            return
        self.objects.update(o for o, _ in objects)
        complete = not file_errors and not any(statuses.get(s) for s in RETRY_STATUSES)
        if not complete:
            self.incomplete.update(o for o, _ in objects)
            return
        ids, positions = seen.column("sample_id").to_pylist(), seen.column("pos").to_pylist()
        if unit.kind == "image_folder":
            by_pos: dict[int, list[tuple[str, int]]] = {}
            for sid, pos in zip(ids, positions):
                by_pos.setdefault(pos, []).append((sid, pos))
            rows = [(obj, sig, by_pos.get(pos, []), 0) for pos, (obj, sig) in enumerate(objects) if sig is not None]
        else:
            obj, sig = objects[0]
            rows = [(obj, sig, list(zip(ids, positions)), unit.index % PIECES)] if sig is not None else []
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
        kept: Iterable[str],
        dropped: set[str],
        table_version: int,
        run_id: str | None,
    ) -> None:
        """Write the manifest: kept objects' rows as they were, plus this run's. Called only after
        the table commit. An object read in several pieces gets its pieces merged into one row."""
        dropped = dropped | self.incomplete
        kept_set = pa.array(sorted(set(kept) - dropped), pa.string())
        old = open_table(manifest_uri, options)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        fresh = ipc.open_file(pa.memory_map(self.path)).read_all() if os.path.exists(self.path) else SCHEMA.empty_table()
        fresh = _merge_pieces(fresh.filter(pc.invert(pc.is_in(fresh.column("object"), value_set=pa.array(sorted(dropped), pa.string())))))
        n = fresh.num_rows
        fresh = fresh.set_column(6, "table_version", pa.array([table_version] * n, pa.int64())).set_column(
            7, "ingest_run_id", pa.array([run_id] * n, pa.string())
        )

        def batches():
            if old is not None and len(kept_set):
                for batch in old.to_batches(batch_size=4096):
                    batch = batch.filter(pc.is_in(batch.column("object"), value_set=kept_set))
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
    """One row per object: a JSONL or Parquet file read in several units had a row per unit.
    An object some of whose pieces were incomplete is not recorded at all."""
    if table.num_rows == len(pc.unique(table.column("object"))):
        return table
    merged: dict[str, dict] = {}
    for row in table.to_pylist():
        into = merged.setdefault(row["object"], {**row, "ids": [], "pieces": [], "positions": []})
        for name in ("ids", "pieces", "positions"):
            into[name].extend(row[name])
    return pa.Table.from_pylist(list(merged.values()), schema=SCHEMA)


def _storable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
