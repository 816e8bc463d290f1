"""Per-shard skip-list sidecars: what the training loader must never yield.

Files (JSON, one per shard and reason, beside the shard):

    <bucket>/<source>/shard.00003.mds.skip.<reason token>.json
    {"format": "prx-skiplist", "version": 1,
     "shard": "shard.00003.mds",        # basename, as in the source's index.json
     "reason": "label:nsfw",             # the reason as given (token is its filename-safe form)
     "shard_samples": 812,               # samples in the shard when the list was built
     "indices": [3, 17, ...],            # sorted, unique sample indices within the shard
     "sample_ids": ["ab12...", ...],     # the skipped samples' ids, same order (audit)
     "kept_sample_ids": ["cd34...", ...] # only when some row had one (dedup): the kept copy
    }

Bytes are canonical (sorted keys, no spaces, one trailing newline), so the same inputs give the
same bytes; a file whose bytes would not change is not rewritten.

Reason tokens: ASCII letters, digits and '-' are kept; every other UTF-8 byte becomes ``_XX``
(upper-case hex), e.g. ``label:nsfw`` -> ``label_3Ansfw``, ``optout:req/42`` ->
``optout_3Areq_2F42``. Safe on POSIX, Windows and object stores, and reversible.

Each bucket folder also gets ``skiplists.json``, the manifest the loader trusts: every sidecar
of the bucket with its sha256 and count, and the sha256 of every source's ``index.json`` at build
time. The loader refuses a bucket whose manifest is missing (unless told not to require it),
lists a sidecar that is missing or changed, misses one found on disk, or was built against
another export of a source. Sidecars are written first and the manifest last, so a crash in
between is caught by those checks instead of being read as a smaller skip list.
"""

from __future__ import annotations

import glob as glob_mod
import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prx_data.core.spill import RowsByKey, SpilledRows, TableByKey
from prx_data.core.storage import (
    Entry,
    Location,
    delete_file,
    file_size,
    glob_entries,
    glob_files,
    join,
    locate,
    try_read_bytes,
    write_if_changed,
)
from prx_data.export._fs import dumps_stable, sha256_bytes
from prx_data.export.index_check import MAX_MANIFEST_BYTES, IndexCheckError, check_relative, check_size, sidecar_byte_cap
from prx_data.export.tree import (
    BUCKET_RE,
    INDEX_BASENAME,
    SKIP_INFIX,
    SOURCE_RE,
    TIER_RE,
    VIEW_PREFIX,
    list_buckets,
    list_sources,
    shard_buckets,
    view_manifest_name,
    view_sidecar_infix,
)
from prx_data.export.tree import SKIPLIST_MANIFEST_BASENAME as MANIFEST_BASENAME

SIDECAR_FORMAT: Final = "prx-skiplist"
SIDECAR_VERSION: Final = 1
MANIFEST_FORMAT: Final = "prx-skiplist-manifest"
MANIFEST_VERSION: Final = 1
SIDECAR_GLOB = "*" + SKIP_INFIX + "*.json"
REWRITE_SHARE = 0.10  # above this skipped share a stream should be rewritten (docs/bucketing.md)
_MAX_TOKEN = 160  # keeps '<shard>.skip.<token>.json' well under 255 bytes
_PLAIN = re.compile(r"[A-Za-z0-9-]")
_TOKEN_RE = re.compile(r"^(?:[A-Za-z0-9-]|_[0-9A-F]{2})+$")


class SkiplistError(ValueError):
    """A sidecar or manifest is missing, malformed or inconsistent; the message names the file."""


@dataclass(frozen=True)
class SkipNames:
    """The file names of one cut of the tree: the default cut's (``.skip.`` sidecars and
    ``skiplists.json``), or an ablation view's (``export.tree.view_sidecar_infix``). Each cut's
    build lists, checks and removes only files of its own names."""

    infix: str = SKIP_INFIX
    manifest: str = MANIFEST_BASENAME

    @property
    def glob(self) -> str:
        return "*" + self.infix + "*.json"


DEFAULT_NAMES: Final = SkipNames()


def view_names(view: str) -> SkipNames:
    return SkipNames(view_sidecar_infix(view), view_manifest_name(view))


# Reason tokens ------------------------------------------------------------------------------
def encode_reason(reason: str) -> str:
    if not reason:
        raise ValueError("empty skip reason")
    out = []
    for char in reason:
        if _PLAIN.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"_{byte:02X}" for byte in char.encode("utf-8"))
    token = "".join(out)
    if len(token) > _MAX_TOKEN:
        raise ValueError(f"skip reason too long for a file name ({len(token)} > {_MAX_TOKEN}): {reason!r}")
    return token


def decode_reason(token: str) -> str:
    if not _TOKEN_RE.fullmatch(token):
        raise ValueError(f"not a skip reason token: {token!r}")
    raw = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            raw.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(token[i].encode())
            i += 1
    return raw.decode("utf-8")


def sidecar_name(shard_basename: str, reason: str, infix: str = SKIP_INFIX) -> str:
    return f"{shard_basename}{infix}{encode_reason(reason)}.json"


def split_sidecar_name(name: str, infix: str = SKIP_INFIX) -> tuple[str, str]:
    """'shard.00003.mds.skip.label_3Ansfw.json' -> ('shard.00003.mds', 'label:nsfw')."""
    base = posixpath.basename(name)
    if not base.endswith(".json") or infix not in base:
        raise ValueError(f"not a sidecar name: {name!r}")
    shard, token = base[: -len(".json")].rsplit(infix, 1)
    return shard, decode_reason(token)


# File models --------------------------------------------------------------------------------
class _Strict(BaseModel):
    # Strict: a float or a bool where an index belongs is a corrupt list, not a value to coerce.
    # Unknown keys are ignored so a later writer can add fields without breaking older readers.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class SidecarFile(_Strict):
    """One sidecar's JSON, as written since ``SIDECAR_VERSION`` 1."""

    format: Literal["prx-skiplist"]
    version: Literal[1]
    shard: str
    reason: str
    shard_samples: int = Field(ge=0)
    indices: list[int]
    sample_ids: list[str]
    kept_sample_ids: list[str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SidecarFile:
        idx = self.indices
        if idx and (idx[0] < 0 or idx[-1] >= self.shard_samples or any(b <= a for a, b in zip(idx, idx[1:]))):
            raise ValueError("indices must be sorted, unique and within [0, shard_samples)")
        if len(self.sample_ids) != len(idx):
            raise ValueError("sample_ids must list one id per index")
        if self.kept_sample_ids is not None and len(self.kept_sample_ids) != len(idx):
            raise ValueError("kept_sample_ids must list one id per index")
        return self

    def to_bytes(self) -> bytes:
        # kept_sample_ids is left out when None, as the first writer did: same inputs, same bytes.
        return dumps_stable(self.model_dump(exclude_none=True))


class ManifestEntry(_Strict):
    path: str  # '<source>/<sidecar name>', relative to the bucket folder
    reason: str
    count: int = Field(ge=0)
    sha256: str


class ManifestFile(_Strict):
    """A bucket's ``skiplists.json``."""

    format: Literal["prx-skiplist-manifest"]
    version: Literal[1]
    sources: dict[str, str]  # source -> sha256 of its index.json at build time
    samples: int = Field(0, ge=0)
    skipped: int = Field(0, ge=0)
    sidecars: list[ManifestEntry]

    def to_bytes(self) -> bytes:
        return dumps_stable(self.model_dump())


def _why(error: ValidationError) -> str:
    """The first problem of a validation error, in a line that names the field."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return f"missing field {where!r}"
    return f"{where}: {first['msg']}" if where else first["msg"].removeprefix("Value error, ")


# Reading ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sidecar:
    path: str
    shard: str
    reason: str
    shard_samples: int
    indices: np.ndarray  # int64, sorted, unique
    sample_ids: list[str]
    kept_sample_ids: list[str] | None


def parse_sidecar(data: bytes, path: str, shard_samples: int | None = None, infix: str = SKIP_INFIX) -> Sidecar:
    """Validate a sidecar's bytes; every error names ``path``."""
    try:
        obj = SidecarFile.model_validate_json(data)
    except ValidationError as error:
        raise SkiplistError(f"malformed skip-list sidecar {path}: {_why(error)}") from None
    try:
        shard_from_name, reason_from_name = split_sidecar_name(path, infix)
    except ValueError as error:
        raise SkiplistError(f"malformed skip-list sidecar {path}: {error}") from None
    if obj.shard != shard_from_name or obj.reason != reason_from_name:
        raise SkiplistError(f"malformed skip-list sidecar {path}: content ({obj.shard!r}, {obj.reason!r}) does not match the file name")
    if shard_samples is not None and obj.shard_samples != shard_samples:
        raise SkiplistError(
            f"malformed skip-list sidecar {path}: built for a shard of {obj.shard_samples} samples, the shard has {shard_samples}"
        )
    indices = np.asarray(obj.indices, dtype=np.int64)
    return Sidecar(path, obj.shard, obj.reason, obj.shard_samples, indices, list(obj.sample_ids), obj.kept_sample_ids)


def read_sidecar(path: str, shard_samples: int | None = None, storage_options: dict | None = None) -> Sidecar:
    """One sidecar by path or URI (local or object store)."""
    data = try_read_bytes(locate(path, storage_options))
    if data is None:
        raise SkiplistError(f"missing skip-list sidecar {path}")
    return parse_sidecar(data, path, shard_samples)


def iter_root_sidecars(
    mds_root: str, storage_options: dict | None = None, entries: list[Entry] | None = None, names: SkipNames = DEFAULT_NAMES
):
    """Every skip-list sidecar under an MDS root (or those of ``entries``, from
    :func:`root_sidecar_entries`), parsed; ``Sidecar.path`` is relative to the root.

    The report, the CLI summary and lineage count skips from here, so an ``s3://`` root reports
    the same numbers as a local one."""
    root = locate(mds_root, storage_options)
    for rel in root_sidecar_entries(root, names.glob) if entries is None else entries:
        data = try_read_bytes(root.child(rel.name))
        if data is not None:  # removed by a concurrent rebuild since the listing
            yield parse_sidecar(data, rel.name, infix=names.infix)


def root_sidecar_entries(root: Location, pattern: str = SIDECAR_GLOB) -> list[Entry]:
    """Sidecars of committed source folders under an MDS root, in one listing; ``Entry.name`` is
    '<tier>/<HxW>/<source>/<sidecar>'. Folders that are not a source's (a dot in the name) are
    left out, so no sidecar is counted twice."""
    out = []
    for entry in glob_entries(root, pattern, recursive=True):
        parts = entry.name.split("/")
        if len(parts) == 4 and TIER_RE.fullmatch(parts[0]) and BUCKET_RE.fullmatch(parts[1]) and SOURCE_RE.fullmatch(parts[2]):
            out.append(entry)
    return out


def shard_sidecars(mds_root: str, shard_rel: str, storage_options: dict | None = None) -> list[Sidecar]:
    """The sidecars beside one shard (``shard_rel`` relative to the MDS root), any storage."""
    folder, shard = posixpath.split(shard_rel)
    loc = locate(mds_root, storage_options).child(folder)
    out = []
    for name in glob_files(loc, glob_mod.escape(shard) + SIDECAR_GLOB):
        data = try_read_bytes(loc.child(name))
        if data is not None:
            out.append(parse_sidecar(data, posixpath.join(folder, name)))
    return out


def shard_view_sidecars(mds_root: str, shard_rel: str, storage_options: dict | None = None) -> list[tuple[str, Sidecar]]:
    """(view, sidecar) of every ablation view's sidecar beside one shard, any storage."""
    folder, shard = posixpath.split(shard_rel)
    loc = locate(mds_root, storage_options).child(folder)
    out = []
    for name in glob_files(loc, glob_mod.escape(shard) + "." + VIEW_PREFIX + "*.json"):
        view = name[len(shard) + 1 + len(VIEW_PREFIX) :].split(".", 1)[0]
        data = try_read_bytes(loc.child(name))
        if data is not None:
            out.append((view, parse_sidecar(data, posixpath.join(folder, name), infix=view_sidecar_infix(view))))
    return out


def read_shard_skips(shard_path: str, shard_samples: int | None = None, storage_options: dict | None = None) -> np.ndarray:
    """Union (sorted int64) of the indices of every sidecar beside ``shard_path`` (path or URI)."""
    folder, name = posixpath.split(shard_path.rstrip("/"))
    parent = locate(folder, storage_options)
    parts = []
    for rel in glob_files(parent, glob_mod.escape(name) + SIDECAR_GLOB):
        data = try_read_bytes(parent.child(rel))
        if data is None:
            continue
        parts.append(parse_sidecar(data, posixpath.join(folder, rel), shard_samples).indices)
    if not parts:
        return np.empty(0, np.int64)
    return np.unique(np.concatenate(parts))


@dataclass(frozen=True)
class BucketSkips:
    manifest_path: str
    sources: dict[str, str]  # source -> index sha256 the lists were built against
    skipped: dict[str, np.ndarray]  # shard basename relative to the bucket -> sorted indices
    num_skipped: int


def parse_manifest(data: bytes, path: str) -> ManifestFile:
    try:
        return ManifestFile.model_validate_json(data)
    except ValidationError as error:
        raise SkiplistError(f"malformed skip-list manifest {path}: {_why(error)}") from None


def _read_manifest_at(loc: Location, path: str) -> ManifestFile:
    check_size(file_size(loc), MAX_MANIFEST_BYTES, f"skip-list manifest {path}")
    data = try_read_bytes(loc)
    if data is None:
        raise SkiplistError(
            f"missing skip-list manifest {path}: build skip lists for this tree (skip_lists asset) or pass require_skiplists=False"
        )
    return parse_manifest(data, path)


def load_bucket_skips(
    bucket_dir: str,
    shard_samples: dict[str, int] | None = None,
    fetch: Callable[[str], str] | None = None,
    expected_sources: dict[str, str] | None = None,
    storage_options: dict | None = None,
    names: SkipNames = DEFAULT_NAMES,
    reasons: Callable[[str], bool] | None = None,
) -> BucketSkips:
    """Load and check every sidecar a bucket's manifest lists, unioned per shard.

    ``bucket_dir`` is a folder or an object-store prefix (reached with ``storage_options``); its
    sidecars that the manifest does not list are an error too (a crash between writing sidecars
    and the manifest). ``fetch(relative path) -> local path`` instead brings each file into a
    local cache (the loader's streams do this); the unlisted check is then left out, since a
    cache holds only what was fetched.
    ``shard_samples`` (shard basename -> samples) checks each sidecar against the index in use.
    ``expected_sources`` (source -> index sha256, from the merged index in use) must equal what
    the lists were built against: indices into another export of a source would skip the wrong
    samples. ``names``: the cut whose files are read (default: the default cut's).
    ``reasons``: only the sidecars whose reason it accepts are read (every one is still listed).
    Before anything is fetched or parsed, each listed path must be '<source>/<sidecar name>'
    (nothing that leaves the bucket or the cache), its count at most its shard's samples, and
    its size at most what that many samples take (``export.index_check``): a planted sidecar of
    millions of indices is refused by its size, not parsed.
    """
    bucket = locate(bucket_dir, storage_options)

    def where(rel: str) -> tuple[str, Location]:
        if fetch is None:
            return join(bucket_dir, rel), bucket.child(*rel.split("/"))
        local = fetch(rel)
        return local, locate(local)

    manifest_path, manifest_loc = where(names.manifest)
    manifest = _read_manifest_at(manifest_loc, manifest_path)
    sources = dict(manifest.sources)
    if expected_sources is not None and sources != expected_sources:
        changed = sorted(name for name in set(sources) | set(expected_sources) if sources.get(name) != expected_sources.get(name))
        raise SkiplistError(f"{manifest_path} was built against another export of sources {changed}: rebuild skip lists")
    per_shard: dict[str, list[np.ndarray]] = defaultdict(list)
    listed = set()
    for entry in manifest.sidecars:
        rel = entry.path
        try:
            check_relative(rel, f"skip-list manifest {manifest_path}: sidecar", max_parts=2)
            if "/" not in rel or not SOURCE_RE.fullmatch(rel.split("/", 1)[0]) or names.infix not in rel:
                raise SkiplistError(
                    f"skip-list manifest {manifest_path}: sidecar {rel!r} is not '<source>/<shard>{names.infix}<reason>.json'"
                )
        except IndexCheckError as exc:
            raise SkiplistError(str(exc)) from None
        listed.add(rel)
        if reasons is not None and not reasons(entry.reason):
            continue
        shard_rel = f"{posixpath.dirname(rel)}/{split_sidecar_name(rel, names.infix)[0]}"
        expected = None if shard_samples is None else shard_samples.get(shard_rel)
        if shard_samples is not None and expected is None:
            raise SkiplistError(f"skip-list sidecar {join(bucket_dir, rel)} names shard {shard_rel}, which the index lacks")
        if expected is not None and entry.count > expected:
            raise SkiplistError(
                f"skip-list manifest {manifest_path}: sidecar {rel} counts {entry.count} skips in a shard of {expected} samples"
            )
        shown, loc = where(rel)
        try:
            check_size(file_size(loc), sidecar_byte_cap(entry.count if expected is None else expected), f"skip-list sidecar {shown}")
        except IndexCheckError as exc:
            raise SkiplistError(str(exc)) from None
        data = try_read_bytes(loc)
        if data is None:
            raise SkiplistError(f"missing skip-list sidecar {shown} (listed in {manifest_path})")
        if sha256_bytes(data) != entry.sha256:
            raise SkiplistError(f"skip-list sidecar {shown} changed since {manifest_path} was written")
        per_shard[shard_rel].append(parse_sidecar(data, shown, expected, names.infix).indices)
    if fetch is None:
        for rel in _bucket_sidecars(bucket, storage_options, names.glob):
            if rel not in listed:
                raise SkiplistError(f"skip-list sidecar {join(bucket_dir, rel)} is not listed in {manifest_path}: rebuild skip lists")
    skipped = {shard: np.unique(np.concatenate(parts)) for shard, parts in sorted(per_shard.items())}
    return BucketSkips(manifest_path, sources, skipped, sum(len(v) for v in skipped.values()))


def _bucket_sidecars(bucket: Location, storage_options: dict | None, pattern: str = SIDECAR_GLOB) -> list[str]:
    """'<source>/<sidecar name>' of every sidecar in a bucket's committed source folders."""
    return [
        f"{source}/{name}" for source in list_sources(bucket.uri, storage_options) for name in glob_files(bucket.child(source), pattern)
    ]


# Building -----------------------------------------------------------------------------------
@dataclass
class SkiplistReport:
    counts: pa.Table  # reason, source, bucket ("tier/HxW"), skipped
    streams: pa.Table  # bucket, samples, skipped (unique), share, rewrite_recommended
    written: int = 0
    unchanged: int = 0
    removed: int = 0
    manifests_written: int = 0
    rewrite_recommended: list[str] = field(default_factory=list)


def _parse_shard_path(path: str) -> tuple[str, str, str]:
    """'1024/768x1344/src/shard.00003.mds' -> ('1024/768x1344', 'src', 'shard.00003.mds')."""
    parts = path.split("/")
    if len(parts) != 4 or not TIER_RE.fullmatch(parts[0]) or not BUCKET_RE.fullmatch(parts[1]) or not SOURCE_RE.fullmatch(parts[2]):
        raise ValueError(f"shard path {path!r} is not '<tier>/<HxW>/<source>/<shard basename>'")
    return f"{parts[0]}/{parts[1]}", parts[2], parts[3]


def _shard_sizes(root: Location, bucket_rel: str, source: str) -> dict[str, int]:
    loc = root.child(bucket_rel, source, INDEX_BASENAME)
    data = try_read_bytes(loc)
    if data is None:
        raise ValueError(f"skip rows name {bucket_rel}/{source}, which has no {loc.uri}")
    return _sizes_of_index(data)


def _sizes_of_index(data: bytes) -> dict[str, int]:
    return {info["raw_data"]["basename"]: int(info["samples"]) for info in json.loads(data)["shards"]}


def _sync_bucket(
    bucket_loc: Location, written: set[str], storage_options: dict | None, report: SkiplistReport, pattern: str = SIDECAR_GLOB
) -> tuple[dict[str, str], int]:
    """Remove a bucket's sidecars that are not in ``written``; (source digests, samples)."""
    for rel in _bucket_sidecars(bucket_loc, storage_options, pattern):
        if rel not in written:
            delete_file(bucket_loc.child(*rel.split("/")))
            report.removed += 1
    digests: dict[str, str] = {}
    total = 0
    for source in list_sources(bucket_loc.uri, storage_options):
        raw = try_read_bytes(bucket_loc.child(source, INDEX_BASENAME))
        if raw is None:  # the source was removed while we ran
            continue
        digests[source] = sha256_bytes(raw)
        total += sum(_sizes_of_index(raw).values())
    return digests, total


def _sidecar_bytes(shard: str, reason: str, samples: int, idx: np.ndarray, sids: list, kept: list | None) -> bytes:
    return SidecarFile(
        format=SIDECAR_FORMAT,
        version=SIDECAR_VERSION,
        shard=shard,
        reason=reason,
        shard_samples=samples,
        indices=idx.tolist(),
        sample_ids=sids,
        kept_sample_ids=kept,
    ).to_bytes()


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    # One chunk first: chunks encoded separately would carry different dictionaries.
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()


def _normalised(table: pa.Table) -> pa.Table:
    missing = {"sample_id", "shard", "index_in_shard", "reason"} - set(table.column_names)
    if missing:
        raise ValueError(f"skip table lacks columns {sorted(missing)}")
    if table.num_rows and any(table[c].null_count for c in ("sample_id", "shard", "index_in_shard", "reason")):
        raise ValueError("skip table has nulls in sample_id/shard/index_in_shard/reason")
    # An empty or all-null column arrives as pa.null(); kept_sample_id is optional.
    wanted = {
        "sample_id": pa.string(),
        "shard": pa.string(),
        "index_in_shard": pa.int64(),
        "reason": pa.string(),
        "kept_sample_id": pa.string(),
    }
    names = [name for name in wanted if name in table.column_names]
    return pa.table({name: table[name].cast(wanted[name]) for name in names})


@dataclass(frozen=True)
class _BucketRows:
    """One bucket's skip rows, sorted by (shard, reason, index) and without repeats.

    ``rows`` holds the sorted rows' Arrow columns; the numpy codes are per row of ``rows``;
    ``starts``/``ends`` delimit the (shard, reason) groups, i.e. the sidecars."""

    rows: pa.Table
    shard_code: np.ndarray  # into the whole table's shard dictionary
    reason_code: np.ndarray
    reasons: list[str]
    index: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def _bucket_rows(table: pa.Table, positions: np.ndarray, shard_code: np.ndarray, shards: list[str]) -> _BucketRows:
    sub = table.take(pa.array(positions))
    codes = shard_code[positions]
    reason_code, reasons = _codes(sub["reason"])
    index = sub["index_in_shard"].to_numpy(zero_copy_only=False)
    order = np.lexsort((index, reason_code, codes))
    codes, reason_code, index = codes[order], reason_code[order], index[order]
    n = len(order)
    same_as_prev = np.zeros(n, dtype=bool)
    if n > 1:
        same_as_prev[1:] = (codes[1:] == codes[:-1]) & (reason_code[1:] == reason_code[:-1]) & (index[1:] == index[:-1])
    if same_as_prev.any():
        # Repeats are allowed only with equal ids: compare just the repeated rows' ids.
        dup = np.flatnonzero(same_as_prev)
        here, before = pa.array(order[dup]), pa.array(order[dup - 1])
        conflict = pc.not_equal(sub["sample_id"].take(here), sub["sample_id"].take(before))
        if "kept_sample_id" in sub.column_names:
            kept_here, kept_before = sub["kept_sample_id"].take(here), sub["kept_sample_id"].take(before)
            differs = pc.fill_null(pc.not_equal(kept_here, kept_before), True)
            both_null = pc.and_(pc.is_null(kept_here), pc.is_null(kept_before))
            conflict = pc.or_(conflict, pc.and_(differs, pc.invert(both_null)))
        bad = np.flatnonzero(conflict.to_numpy(zero_copy_only=False))
        if len(bad):
            row = int(dup[bad[0]])
            raise ValueError(f"conflicting skip rows for {shards[codes[row]]} index {index[row]}")
        keep = ~same_as_prev
        order, codes, reason_code, index = order[keep], codes[keep], reason_code[keep], index[keep]
        n = len(order)
    starts = np.flatnonzero(np.r_[True, (codes[1:] != codes[:-1]) | (reason_code[1:] != reason_code[:-1])]) if n else np.empty(0, np.int64)
    ends = np.r_[starts[1:], n] if n else starts
    return _BucketRows(sub.take(pa.array(order)), codes, reason_code, reasons, index, starts, ends)


def _checked_groups(
    rows: _BucketRows, parsed: list[tuple[str, str, str]], shards: list[str], sizes: dict[tuple[str, str], dict[str, int]]
) -> list[tuple[int, int, str, str, str, int]]:
    """(start, end, source, shard basename, reason, shard samples) per sidecar of the bucket."""
    out = []
    for start, end in zip(rows.starts.tolist(), rows.ends.tolist()):
        code = int(rows.shard_code[start])
        bucket, source, basename = parsed[code]
        samples = sizes[(bucket, source)].get(basename)
        if samples is None:
            raise ValueError(f"shard {shards[code]} is not in {bucket}/{source}/{INDEX_BASENAME}")
        if rows.index[start] < 0 or rows.index[end - 1] >= samples:
            raise ValueError(f"index out of range for {shards[code]} ({samples} samples)")
        out.append((start, end, source, basename, rows.reasons[rows.reason_code[start]], samples))
    return out


# Skip rows ----------------------------------------------------------------------------------------
SKIP_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index_in_shard", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("kept_sample_id", pa.string()),
    ]
)
SKIP_COLUMNS = SKIP_SCHEMA.names
# Skip rows per sample-id range: a range is what a distinct count holds at once.
RANGE_ROWS = 1_000_000


def as_skip_rows(table: pa.Table) -> pa.Table:
    """``table`` in SKIP_SCHEMA; a missing ``kept_sample_id`` is null."""
    if "kept_sample_id" not in table.column_names:
        table = table.append_column("kept_sample_id", pa.nulls(table.num_rows, pa.string()))
    return table.select(SKIP_COLUMNS).cast(SKIP_SCHEMA)


def _skip_row_buckets(table: pa.Table) -> pa.Array | pa.ChunkedArray:
    # Unparsable shard paths get bucket "" and are refused by build_skiplists with the path
    # named, as a table holding them would be.
    return pc.fill_null(shard_buckets(table["shard"]), "")


class SpilledSkips(SpilledRows):
    """A skip-list build's rows (one per sample, placement and reason: duplicates, excluded
    labels, opt-outs, superseded placements, folded originals; 5-10 % of the corpus), never whole
    in memory. Spilled twice (``core.spill.SpilledRows``): by bucket, so the sidecars and
    manifest of one bucket are made from that bucket's rows alone (``build_skiplists``); by
    sample-id range, so distinct counts (skipped samples, per source, per opt-out request) are
    summed range by range."""

    def __init__(self, folder: str, expected_rows: int = 0, range_rows: int = RANGE_ROWS):
        super().__init__(folder, SKIP_SCHEMA, _skip_row_buckets, expected_rows=expected_rows, range_rows=range_rows)

    def add(self, table: pa.Table) -> None:
        super().add(as_skip_rows(table))

    def bucket_names(self) -> list[str]:
        return sorted(super().bucket_names())

    def distinct_samples(self) -> tuple[int, dict[str, int]]:
        """(samples skipped, samples skipped per source): a sample skipped for two reasons or in
        two placements counts once."""
        total, per_source = 0, dict[str, int]()
        for rows in self.id_ranges():
            if not rows.num_rows:
                continue
            total += pc.count_distinct(rows["sample_id"], mode="all").as_py()
            pairs = rows.select(["source", "sample_id"]).group_by(["source", "sample_id"], use_threads=False).aggregate([])
            counts = pairs.group_by("source", use_threads=False).aggregate([("sample_id", "count")])
            for source, count in zip(counts["source"].to_pylist(), counts["sample_id_count"].to_pylist()):
                per_source[source] = per_source.get(source, 0) + count
        return total, dict(sorted(per_source.items()))


def _skips_by_bucket(table: pa.Table) -> TableByKey:
    """A skip table seen a bucket at a time; every shard path is checked first, as one table."""
    table = _normalised(table)
    for path in _codes(table["shard"])[1]:
        _parse_shard_path(path)
    return TableByKey(table, _skip_row_buckets(table))


def build_skiplists(
    table: pa.Table | RowsByKey,
    mds_root: str,
    rewrite_share: float = REWRITE_SHARE,
    storage_options: dict | None = None,
    names: SkipNames = DEFAULT_NAMES,
) -> SkiplistReport:
    """Make the sidecars under ``mds_root`` say exactly what ``table`` says.

    ``table``: ``sample_id, shard (path relative to the MDS root), index_in_shard, reason`` and
    optional ``kept_sample_id``; the same (shard, index, reason) may repeat only with equal ids.
    It may also be rows spilled by bucket (``core.spill.RowsByKey``), read one bucket at a time.
    The rows are the whole truth for the tree: sidecars of (shard, reason) pairs they do not
    mention are removed, and every bucket gets a fresh manifest (also when nothing is skipped).
    ``mds_root`` is a folder or an ``s3://`` / ``gs://`` root that ``storage_options``
    (Lance-style) reach. Both get the same names and bytes, each file written whole (a rename
    locally, one PUT on an object store), sidecars first and the manifest last.

    Memory is bounded by a bucket, not the corpus (beyond a table's own Arrow columns when one
    is given): one bucket's rows, their sample ids as Python strings and their sidecar bytes at a
    time. ``names``: the cut written (an ablation view's files leave the default cut's alone). Every bucket is checked (conflicts, shards, ranges) before the first file is written,
    so bad rows change nothing.
    """
    root = locate(mds_root, storage_options)
    rows_by_bucket = _skips_by_bucket(table) if isinstance(table, pa.Table) else table
    named = sorted(rows_by_bucket.bucket_names())
    named_set = set(named)
    tree_buckets = {ref.rel for ref in list_buckets(mds_root, storage_options)}
    unknown = sorted(named_set - tree_buckets)
    if unknown:
        for name in unknown:  # an unparsable shard path is named as such
            for path in _codes(_normalised(rows_by_bucket.bucket(name))["shard"])[1]:
                _parse_shard_path(path)
        raise ValueError(f"skip rows name buckets that are not in {mds_root}: {unknown[:5]}")
    sizes: dict[tuple[str, str], dict[str, int]] = {}

    def bucket_rows(bucket: str) -> tuple[_BucketRows, list[tuple[str, str, str]], list[str]]:
        rows = _normalised(rows_by_bucket.bucket(bucket))
        shard_code, shards = _codes(rows["shard"])
        parsed = [_parse_shard_path(path) for path in shards]
        for rel, source, _ in parsed:
            if rel != bucket:
                raise ValueError(f"shard {rel}/{source} was read as a row of bucket {bucket}")
            if (rel, source) not in sizes:
                sizes[(rel, source)] = _shard_sizes(root, rel, source)
        return _bucket_rows(rows, np.arange(rows.num_rows), shard_code, shards), parsed, shards

    # Check pass: no file is touched until every bucket's rows are known to be good.
    for bucket in named:
        rows, parsed, shards = bucket_rows(bucket)
        _checked_groups(rows, parsed, shards, sizes)
        del rows

    report = SkiplistReport(counts=pa.table({}), streams=pa.table({}))
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    stream_rows = []
    for bucket in sorted(tree_buckets):
        bucket_loc = root.child(*bucket.split("/"))
        entries: dict[str, tuple[str, str, int]] = {}  # rel -> (sha256, reason, count)
        skipped = 0
        if bucket in named_set:
            rows, parsed, shards = bucket_rows(bucket)
            kept_column = rows.rows["kept_sample_id"] if "kept_sample_id" in rows.rows.column_names else None
            for start, end, source, basename, reason, samples in _checked_groups(rows, parsed, shards, sizes):
                sids = rows.rows["sample_id"].slice(start, end - start).to_pylist()
                kept = None
                if kept_column is not None:
                    chunk = kept_column.slice(start, end - start)
                    if chunk.null_count < len(chunk):
                        kept = ["" if value is None else value for value in chunk.to_pylist()]
                data = _sidecar_bytes(basename, reason, samples, rows.index[start:end], sids, kept)
                rel = f"{source}/{sidecar_name(basename, reason, names.infix)}"
                if write_if_changed(bucket_loc.child(*rel.split("/")), data):
                    report.written += 1
                else:
                    report.unchanged += 1
                entries[rel] = (sha256_bytes(data), reason, end - start)
                counts[(reason, source, bucket)] += end - start
            # Unique skipped samples (a sample may be skipped for several reasons).
            if len(rows.index):
                skipped = len(np.unique(rows.shard_code.astype(np.int64) * (int(rows.index.max()) + 1) + rows.index))
            del rows, kept_column
        digests, total = _sync_bucket(bucket_loc, set(entries), storage_options, report, names.glob)
        if not digests:
            # Every source left this bucket: no manifest (corpus_index retires the bucket; a
            # manifest here would make it look like a stream that does not open).
            delete_file(bucket_loc.child(names.manifest))  # tolerates its absence
            continue
        manifest = ManifestFile(
            format=MANIFEST_FORMAT,
            version=MANIFEST_VERSION,
            sources=digests,
            samples=total,
            skipped=skipped,
            sidecars=[
                ManifestEntry(path=rel, reason=reason, count=count, sha256=sha) for rel, (sha, reason, count) in sorted(entries.items())
            ],
        )
        if write_if_changed(bucket_loc.child(names.manifest), manifest.to_bytes()):
            report.manifests_written += 1
        if total:
            share = skipped / total
            stream_rows.append((bucket, total, skipped, share, share > rewrite_share))
            if share > rewrite_share:
                report.rewrite_recommended.append(bucket)

    keys = sorted(counts)
    report.counts = pa.table(
        {
            "reason": pa.array([k[0] for k in keys], pa.string()),
            "source": pa.array([k[1] for k in keys], pa.string()),
            "bucket": pa.array([k[2] for k in keys], pa.string()),
            "skipped": pa.array([counts[k] for k in keys], pa.int64()),
        }
    )
    report.streams = pa.table(
        {
            "bucket": pa.array([r[0] for r in stream_rows], pa.string()),
            "samples": pa.array([r[1] for r in stream_rows], pa.int64()),
            "skipped": pa.array([r[2] for r in stream_rows], pa.int64()),
            "share": pa.array([r[3] for r in stream_rows], pa.float64()),
            "rewrite_recommended": pa.array([r[4] for r in stream_rows], pa.bool_()),
        }
    )
    return report
