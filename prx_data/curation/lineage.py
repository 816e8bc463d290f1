"""Lineage: everything known about a sample, found by id, URL, source key or image.

Backward to the source row (captions, label, hash and the versions that made them) and forward
to every shard that holds it, with whether and why the loader skips it. Plain module: the CLI
adds the Dagster runs that produced each step through ``runs_lookup``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prx_data.core.filters import Expr, any_of, equals, one_of
from prx_data.core.ids import sample_id as make_sample_id
from prx_data.core.lance_io import SCAN_ROWS, open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.urls import key_uri, load_url_key, normalize_url, redact_text, redact_url, url_keys
from prx_data.curation.optout.files import UnreadableFile, read_image_file
from prx_data.export.skiplist import shard_sidecars

ROW_COLUMNS = (
    "sample_id",
    "source",
    "source_key",
    "status",
    "error",
    "source_url",
    "license",
    "image_format",
    "colour_space",
    "colour_error",
    "width",
    "height",
    "source_caption",
    "caption",
    "caption_model",
    "caption_prompt_version",
    "caption_error",
    "label",
    "label_model",
    "label_version",
    "label_error",
    "label_score",
    "phash",
    "phash_version",
    "phash_degenerate",
    "image_sha256",
    "ingested_at",
    # The run that wrote each derived column group (stages.column_stage.run_id_column).
    "ingest_run_id",
    "phash_run_id",
    "colour_run_id",
    "caption_run_id",
    "label_run_id",
)


@dataclass
class Placement:
    tier: int | None
    bucket: str | None
    shard: str | None
    index_in_shard: int | None
    drop_reason: str | None
    export_version: str | None
    export_run_id: str | None = None  # the run that placed (or dropped) it
    skipped: list[dict] = field(default_factory=list)  # reason, sidecar, kept_sample_id
    folded_from: str | None = None  # "tier/HxW": a copy the fold policy made (curation/fold.py)


@dataclass
class LineageRecord:
    matched_by: str
    row: dict[str, Any]
    placements: list[Placement] = field(default_factory=list)
    optout_requests: list[str] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)

    @property
    def sample_id(self) -> str:
        return self.row["sample_id"]

    @property
    def skipped(self) -> bool:
        """No placement is yielded (a folded original is skipped, its copy is not)."""
        placed = [p for p in self.placements if p.shard]
        return bool(placed) and all(p.skipped for p in placed)

    def to_json(self) -> dict:
        out = asdict(self)
        out["skipped"] = self.skipped
        out["row"] = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in self.row.items()}
        return out


RunsLookup = Callable[[str, str, dict], dict[str, dict]]  # (source, sample_id, row) -> asset -> run info


def _rows(paths: StoragePaths, sources: Iterable[str], where: Expr, options: dict | None) -> list[dict]:
    found: list[dict] = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None:
            continue
        cols = [c for c in ROW_COLUMNS if c in ds.schema.names]
        found.extend(_shown(r) for r in ds.to_table(columns=cols, filter=where).to_pylist())
    return found


def _shown(row: dict) -> dict:
    """The row as lineage may print it: a table written before redaction still holds the
    original URL, so it is redacted here too."""
    if row.get("source_url"):
        row["source_url"] = redact_url(row["source_url"])
    if row.get("error"):
        row["error"] = redact_text(row["error"])
    return row


def _url_filter(url: str, key: bytes | None) -> Expr:
    """Rows of this URL: by the keyed hash of the original (redacted rows), or the URL as
    stored (rows from before redaction, or a query given in redacted form)."""
    spellings = {url, normalize_url(url)}
    wanted = spellings | {r for r in map(redact_url, spellings) if r}
    where = one_of("source_url", sorted(wanted))
    return any_of(where, one_of("source_url_key", url_keys(url, key))) if key else where


def _url_rows(paths: StoragePaths, sources: Iterable[str], url: str, key: bytes | None, options: dict | None) -> list[dict]:
    found = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None:
            continue
        has_key = "source_url_key" in ds.schema.names
        found += _rows(paths, [source], _url_filter(url, key if has_key else None), options)
    return found


def _placements(paths: StoragePaths, mds_root: str, source: str, sid: str, options: dict | None) -> list[Placement]:
    ds = open_table(paths.exports_table(source), options)
    if ds is None:
        return []

    out = []
    rows = ds.to_table(filter=equals("sample_id", sid)).to_pylist()
    folds = open_table(paths.folds_table(source), options)
    if folds is not None:
        rows += [
            {**r, "drop_reason": None, "export_version": None, "export_run_id": r["fold_run_id"]}
            for r in folds.to_table(filter=equals("sample_id", sid)).to_pylist()
        ]
    for row in rows:
        placement = Placement(
            row["tier"],
            row["bucket"],
            row["shard"],
            row["index_in_shard"],
            row["drop_reason"],
            row["export_version"],
            row.get("export_run_id"),
            folded_from=row.get("folded_from"),
        )
        if row["shard"]:
            for sidecar in shard_sidecars(mds_root, row["shard"], options):
                if sid in sidecar.sample_ids:
                    i = sidecar.sample_ids.index(sid)
                    kept = sidecar.kept_sample_ids[i] if sidecar.kept_sample_ids else None
                    placement.skipped.append({"reason": sidecar.reason, "sidecar": sidecar.path, "kept_sample_id": kept})
        out.append(placement)
    return out


def _optouts(paths: StoragePaths, sid: str, options: dict | None) -> list[str]:
    ds = open_table(paths.optout_samples_table(), options)
    if ds is None:
        return []
    return sorted(set(ds.to_table(columns=["request_id"], filter=equals("sample_id", sid)).column("request_id").to_pylist()))


def find(
    paths: StoragePaths,
    sources: Iterable[str],
    *,
    sample_id: str | None = None,
    url: str | None = None,
    source_key: str | None = None,
    image: str | Path | None = None,
    max_hamming: int = 0,
    options: dict | None = None,
    runs_lookup: RunsLookup | None = None,
) -> list[LineageRecord]:
    """Every sample matching the query. Raises ValueError for a malformed query."""
    sources = list(sources)
    matches: list[tuple[str, dict]] = []
    if sample_id:
        if len(sample_id) != 32 or any(c not in "0123456789abcdef" for c in sample_id):
            raise ValueError(f"{sample_id!r} is not a sample id (32 lowercase hex characters)")
        matches += [("sample_id", r) for r in _rows(paths, sources, equals("sample_id", sample_id), options)]
    if url:
        key = load_url_key(key_uri(paths.lance_root), options)
        matches += [("url", r) for r in _url_rows(paths, sources, url, key, options)]
    if source_key:
        if ":" not in source_key:
            raise ValueError(f"{source_key!r}: expected '<source>:<key>'")
        source, item_key = source_key.split(":", 1)
        if source in sources:
            sid = make_sample_id(source, item_key)
            matches += [("source_key", r) for r in _rows(paths, [source], equals("sample_id", sid), options)]
    if image is not None:
        matches += [("image", r) for r in _image_matches(paths, sources, Path(image), max_hamming, options)]

    records, seen = [], set()
    mds_root = paths.mds_root
    for how, row in matches:
        if row["sample_id"] in seen:
            continue
        seen.add(row["sample_id"])
        record = LineageRecord(how, row)
        record.placements = _placements(paths, mds_root, row["source"], row["sample_id"], options)
        record.optout_requests = _optouts(paths, row["sample_id"], options)
        if runs_lookup:
            record.runs = runs_lookup(row["source"], row["sample_id"], row)
        records.append(record)
    return records


def _image_matches(paths: StoragePaths, sources: list[str], image: Path, max_hamming: int, options: dict | None) -> list[dict]:
    # lazy: pulls in PIL
    import numpy as np

    from prx_data.imaging.decode import DecodeError
    from prx_data.imaging.hash_index import as_uint64, hamming
    from prx_data.imaging.phash import phash_bytes

    try:
        # Typed and capped: a FIFO, a device or a huge file is refused before anything is read.
        target = phash_bytes(read_image_file(image))
    except UnreadableFile as exc:
        raise ValueError(str(exc)) from None
    except DecodeError as exc:
        raise ValueError(f"image file {image} cannot be decoded: {exc}") from None
    found = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None or "phash" not in ds.schema.names:
            continue
        # Batch by batch in numpy: a source's hashes never become Python ints (an opt-out over a
        # 50 M-row source compared 50 M of them one by one).
        ids: list[str] = []
        for batch in ds.to_batches(columns=["sample_id", "phash"], filter="phash IS NOT NULL", batch_size=SCAN_ROWS):
            hashes = as_uint64(batch.column("phash").to_numpy(zero_copy_only=False))
            near = np.flatnonzero(hamming(hashes, as_uint64(np.int64(target))) <= max_hamming)
            ids += batch.column("sample_id").take(near).to_pylist()
        if ids:
            where = one_of("sample_id", ids)
            found += _rows(paths, [source], where, options)
    return found


def format_record(record: LineageRecord) -> str:
    row = record.row
    lines = [
        f"sample {row['sample_id']}  (matched by {record.matched_by})",
        f"  source     {row['source']} : {row['source_key']}",
        f"  status     {row['status']}"
        + (f"  ({row['error']})" if row.get("error") else "")
        + (f"  [ingest run={row['ingest_run_id']}]" if row.get("ingest_run_id") else ""),
    ]
    for key in ("source_url", "license", "image_format"):
        if row.get(key):
            lines.append(f"  {key:<10} {row[key]}")
    if row.get("width"):
        lines.append(f"  size       {row['width']}x{row['height']} (as displayed)")
    if "colour_space" in row:
        space = row.get("colour_space") or "not read yet"
        read_by = f" [run={row['colour_run_id']}]" if row.get("colour_run_id") else ""
        lines.append(f"  colour     {space}" + (f"  ({row['colour_error']})" if row.get("colour_error") else "") + read_by)
    if row.get("source_caption"):
        lines.append(f"  source cap {row['source_caption']}")

    def made_by(group: str) -> str:
        run = row.get(f"{group}_run_id")
        return f" run={run}" if run else ""

    if "caption" in row:
        lines.append(
            f"  caption    {row.get('caption')!r} [model={row.get('caption_model')} prompt={row.get('caption_prompt_version')}{made_by('caption')}]"
            + (f" error={row['caption_error']}" if row.get("caption_error") else "")
        )
    if "label" in row:
        score = f" score={row['label_score']:.2f}" if row.get("label_score") is not None else ""
        lines.append(
            f"  label      {row.get('label')}{score} [model={row.get('label_model')} version={row.get('label_version')}{made_by('label')}]"
        )
    if "phash" in row:
        phash = row.get("phash")
        lines.append(
            f"  phash      {phash & 0xFFFFFFFFFFFFFFFF:016x} [{row.get('phash_version')}{made_by('phash')}]"
            if phash is not None
            else "  phash      -"
        )
        if row.get("phash_degenerate"):
            lines.append(f"  identity   flat image: matched by content key sha256={row.get('image_sha256')}, never by phash")
    if not record.placements:
        lines.append("  export     not exported yet")
    for p in record.placements:
        if p.shard:
            run_note = f" run={p.export_run_id}" if p.export_run_id else ""
            made = f"folded from {p.folded_from}" if p.folded_from else p.export_version
            lines.append(f"  shard      {p.shard} #{p.index_in_shard}  (tier {p.tier}, bucket {p.bucket}, {made}{run_note})")
        else:
            lines.append(f"  export     dropped: {p.drop_reason}" + (f" [run={p.export_run_id}]" if p.export_run_id else ""))
        for s in p.skipped:
            kept = f", kept copy {s['kept_sample_id']}" if s.get("kept_sample_id") else ""
            lines.append(f"  SKIPPED    {s['reason']}{kept}  ({s['sidecar']})")
    if record.placements and not record.skipped and any(p.shard for p in record.placements):
        lines.append("  training   yielded by the loader (no skip list names it)")
    for request in record.optout_requests:
        lines.append(f"  opt-out    request {request}")
    for asset, run in sorted(record.runs.items()):
        version = f"  lance v{run['lance_version']}" if "lance_version" in run else ""
        lines.append(f"  run        {asset:<15} {run.get('run_id')}  {run.get('timestamp', '')}{version}")
    return "\n".join(lines)


__all__ = ["LineageRecord", "Placement", "find", "format_record"]
