"""The data card: what the current export holds, as Markdown for the UI and a file."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.counts import reason_codes, value_counter, word_histogram
from prx_data.core.histogram import summary_row
from prx_data.core.lance_io import SCAN_ROWS, open_table, scan_text
from prx_data.core.paths import StoragePaths
from prx_data.core.spill import SpilledPartitions, partition_count, range_bounds
from prx_data.core.storage import Entry, locate, write_bytes
from prx_data.export.corpus_index import retired_buckets, unpublished_buckets
from prx_data.export.skiplist import iter_root_sidecars, root_sidecar_entries
from prx_data.export.tree import INDEX_BASENAME, data_card_path


@dataclass
class DataCard:
    markdown: str
    totals: dict[str, int] = field(default_factory=dict)

    def write(self, mds_root: str, options: dict | None = None) -> str:
        """Write the data card into the tree at ``mds_root`` (a folder or an object-store root,
        via ``options``); returns its path."""
        path = data_card_path(mds_root)
        write_bytes(locate(path, options), self.markdown.encode())
        return path


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _folded(paths: StoragePaths, sources: list[str], options: dict | None) -> list[str]:
    # lazy: pulls in streaming (torch)
    from prx_data.curation.fold import fold_summary

    rows = fold_summary(paths, sources, options)
    if not rows:
        return ["No bucket is folded (PRX_FOLD_SPARSE_BUCKETS off, or no sparse bucket has a published neighbour in reach)."]
    return [
        "Images of sparse buckets re-exported into the nearest published shape of their tier; their originals are skipped as `folded`.",
        "",
        *_table(("from", "into", "samples"), rows),
    ]


def _unpublished(paths: StoragePaths, options: dict | None) -> list[str]:
    """Buckets left out of training (too few unskipped samples), with their counts."""

    notes = unpublished_buckets(paths.mds_root, options)
    if not notes:
        return ["Every bucket is published."]
    minimum = max(int(n.get("min_stream_samples", 1)) for n in notes.values())
    rows = [(rel, n.get("samples"), n.get("unskipped"), n.get("reason")) for rel, n in sorted(notes.items())]
    return [
        f"Buckets with fewer unskipped samples than `min_stream_samples` ({minimum}) stay in the tree "
        f"without a bucket {INDEX_BASENAME}, so no trainer streams them.",
        "",
        *_table(("bucket", "samples", "unskipped", "reason"), rows),
    ]


def _retired(paths: StoragePaths, options: dict | None) -> list[str]:
    """Buckets every source left: their leftovers were removed, no trainer streams them."""
    record = retired_buckets(paths.mds_root, options)
    if not record:
        return ["No bucket has been retired."]
    rows = [(rel, r.get("retired_at"), ", ".join(r.get("sources") or []) or "-") for rel, r in sorted(record.items())]
    return [
        "Emptied by every source (images removed or moved to another shape): index, manifest and "
        "sidecars removed; a later export into the shape revives the bucket.",
        "",
        *_table(("bucket", "retired at", "sources before"), rows),
    ]


_RAW_COLUMNS = ("status", "caption", "caption_model", "caption_prompt_version", "label", "label_model", "colour_space")
# What a usable row without a colour space yet (a table made before the column) is counted as.
NOT_READ = "not read yet"


@dataclass
class _Tally:
    """Counts over every scanned batch: the card holds these, never a row."""

    tiers: Counter[int] = field(default_factory=Counter)
    buckets: Counter[str] = field(default_factory=Counter)
    labels: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    caption_models: Counter[str] = field(default_factory=Counter)
    label_models: Counter[str | None] = field(default_factory=Counter)
    words: Counter[int] = field(default_factory=Counter)  # caption length in words -> captions
    reasons: Counter[str] = field(default_factory=Counter)  # skip reason -> sidecar entries
    colours: Counter[tuple[str, str]] = field(default_factory=Counter)  # (source, colour space) -> usable rows


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """``name``, or nulls for a table made before the column existed."""
    if name in batch.schema.names:
        return batch.column(name)
    return pa.nulls(batch.num_rows, pa.string())


def _non_empty(values: pa.Array) -> pa.Array:
    """What ``bool(value)`` says of a nullable string: neither null nor empty."""
    return pc.fill_null(pc.not_equal(values, ""), False)


def _count_groups(counter: Counter, table: pa.Table, keys: list[str], name) -> None:
    """``counter[name(*key values)] += rows`` per distinct key: one Python step per group."""
    if not table.num_rows:
        return
    grouped = table.group_by(keys).aggregate([([], "count_all")])
    for row in grouped.to_pylist():
        counter[name(*(row[k] for k in keys))] += row["count_all"]


def _tally_raw(tally: _Tally, raw: lance.LanceDataset, source: str) -> tuple[int, int]:
    """(rows, usable rows) of one raw table, its captions, labels and colour spaces counted
    into ``tally``."""
    cols = [c for c in _RAW_COLUMNS if c in raw.schema.names]
    rows = ok = 0
    for batch in scan_text(raw, cols):
        rows += batch.num_rows
        usable = pc.fill_null(pc.equal(_column(batch, "status"), "ok"), False)
        ok += pc.sum(usable).as_py() or 0
        spaces = pa.table({"c": pc.fill_null(_column(batch, "colour_space"), NOT_READ)}).filter(usable)
        _count_groups(tally.colours, spaces, ["c"], lambda space: (source, space))
        caption = _column(batch, "caption")
        captioned = _non_empty(caption)
        if pc.any(captioned).as_py():
            tally.words.update(word_histogram(caption.filter(captioned)))
            models = pa.table({"m": _column(batch, "caption_model"), "v": _column(batch, "caption_prompt_version")})
            _count_groups(tally.caption_models, models.filter(captioned), ["m", "v"], lambda m, v: f"{m} / prompt {v}")
        label = _column(batch, "label")
        labelled = pa.table({"l": label, "m": _column(batch, "label_model")}).filter(_non_empty(label))
        _count_groups(tally.labels, labelled, ["l"], lambda value: value)
        _count_groups(tally.label_models, labelled, ["m"], lambda value: value)
    return rows, ok


# Sample ids of a source per sample-id range of the skipped-exports count.
ID_RANGE_ROWS = 1_000_000
_IDS = pa.schema([("sample_id", pa.string())])


def _tally_exports(tally: _Tally, exports: lance.LanceDataset, ids: SpilledPartitions) -> int:
    """Exported rows of one source, their sample ids spilled into ``ids``; tiers, buckets and
    drop reasons counted into ``tally``."""
    exported = 0
    for batch in exports.to_batches(columns=["sample_id", "tier", "bucket", "drop_reason"], batch_size=SCAN_ROWS):
        table = pa.Table.from_batches([batch])
        reason = table.column("drop_reason")
        dropped = _non_empty(reason)
        tally.drops.update(value_counter(reason_codes(reason.filter(dropped))))
        kept = table.filter(pc.invert(dropped))
        exported += kept.num_rows
        ids.add(pa.table({"sample_id": kept.column("sample_id").cast(pa.string())}))
        _count_groups(tally.tiers, kept, ["tier"], lambda tier: tier)
        _count_groups(tally.buckets, kept, ["tier", "bucket"], lambda tier, bucket: f"{tier}/{bucket}")
    return exported


def _skipped_ids(tally: _Tally, mds_root: str, options: dict | None, entries: list[Entry], ids: SpilledPartitions | None = None) -> None:
    """Every reason of the sidecars ``entries`` counted into ``tally``; the sample ids they skip
    spilled into ``ids`` (a folded original is trained from its copy, so not counted)."""
    # lazy: pulls in streaming (torch)
    from prx_data.curation.fold import FOLDED

    for sidecar in iter_root_sidecars(mds_root, options, entries=entries):
        tally.reasons[sidecar.reason] += len(sidecar.indices)
        if ids is not None and sidecar.reason != FOLDED:
            ids.add(pa.table({"sample_id": pa.array(sidecar.sample_ids, pa.string())}))


def _exported_and_skipped(exported: SpilledPartitions, skipped: SpilledPartitions) -> tuple[int, int]:
    """(distinct exported ids, how many of them are skipped), one sample-id range at a time: an
    id lives in one range, so the counts add up."""
    exported.close()
    skipped.close()
    distinct = hit = 0
    for part in range(exported.partitions):
        ids = pc.unique(exported.read(part)["sample_id"])
        distinct += len(ids)
        skips = skipped.read(part)["sample_id"]
        if len(skips):
            hit += pc.sum(pc.is_in(ids, value_set=pc.unique(skips))).as_py() or 0
    return distinct, hit


def build_data_card(
    paths: StoragePaths, sources: list[str], *, exclude_labels=(), options: dict | None = None, generated_at: datetime | None = None
) -> DataCard:
    """The card of ``sources`` under ``paths`` (local or object-store roots alike, via ``options``).
    ``generated_at`` (default: now) is the one line that differs between two equal corpora.

    Tables are scanned in batches and counted in Arrow; what is held across batches is counts.
    A source's exported and skipped sample ids are spilled by sample-id range to a temporary
    folder and counted one range at a time, so memory follows neither a source nor the corpus."""
    tally = _Tally()
    # Sidecars sit under <tier>/<HxW>/<source>/: a source's skips are read with its exports.
    sidecars: dict[str, list[Entry]] = {}
    for entry in root_sidecar_entries(locate(paths.mds_root, options)):
        sidecars.setdefault(entry.name.split("/")[2], []).append(entry)
    per_source: list[tuple[str, int, int, int]] = []
    totals = {"exported": 0, "skipped": 0}
    for source in sources:
        raw = open_table(paths.raw_table(source), options)
        if raw is None:
            continue
        rows, ok = _tally_raw(tally, raw, source)
        exported = 0
        exp = open_table(paths.exports_table(source), options)
        if exp is not None:
            with tempfile.TemporaryDirectory(prefix="prx-card-") as folder:
                bounds = range_bounds(partition_count(exp.count_rows(), ID_RANGE_ROWS))
                exported_ids = SpilledPartitions(os.path.join(folder, "exported"), _IDS, bounds)
                skipped_ids = SpilledPartitions(os.path.join(folder, "skipped"), _IDS, bounds)
                exported = _tally_exports(tally, exp, exported_ids)
                _skipped_ids(tally, paths.mds_root, options, sidecars.pop(source, []), skipped_ids)
                distinct, skipped = _exported_and_skipped(exported_ids, skipped_ids)
            # A sample id hashes its source's name, so ids of two sources never meet: totals add.
            totals["exported"] += distinct
            totals["skipped"] += skipped
        per_source.append((source, rows, ok, exported))
    for entries in sidecars.values():  # sources not on the card: their skips still count by reason
        _skipped_ids(tally, paths.mds_root, options, entries)
    totals["trainable"] = totals["exported"] - totals["skipped"]

    lines = [
        "# Data card",
        "",
        f"Generated {(generated_at or datetime.now(UTC)).isoformat(timespec='seconds')}. "
        f"{totals['exported']} samples exported, {totals['skipped']} skipped, **{totals['trainable']} trainable**.",
        "",
        "## Sources",
        *_table(("source", "rows", "usable", "exported"), per_source),
        "",
        "## Colour spaces",
        "The colour space each usable image's embedded ICC profile declares. Export converts "
        "every one but `srgb`, `none` (no profile) and `invalid-profile` (a profile that does not "
        "parse or fit its image: used as sRGB) to sRGB.",
        "",
        *_table(("source", "colour space", "rows"), [(src, space, n) for (src, space), n in sorted(tally.colours.items())]),
        "",
        "## Resolution tiers",
        *_table(("tier", "samples"), sorted(tally.tiers.items())),
        "",
        "## Buckets (tier/HxW)",
        *_table(("bucket", "samples"), sorted(tally.buckets.items())),
        "",
        "## Buckets not published for training",
        *_unpublished(paths, options),
        "",
        "## Retired buckets",
        *_retired(paths, options),
        "",
        "## Sparse buckets folded into a neighbour",
        *_folded(paths, sources, options),
        "",
        "## Dropped at export",
        *_table(("reason", "samples"), sorted(tally.drops.items())),
        "",
        "## Excluded by skip lists",
        *_table(("reason", "samples"), sorted(tally.reasons.items())),
        "",
        "## Caption labels",
        *_table(("label", "captions"), sorted(tally.labels.items())),
        f"Excluded labels: {', '.join(exclude_labels) or 'none'}. Label models: {dict(tally.label_models)}.",
        "",
        "## Captions",
    ]
    if tally.words:
        lines += _table(("min", "p10", "median", "p90", "max"), [summary_row(tally.words)])
    lines += ["", "Captioner and prompt versions:", *_table(("captioner / prompt", "captions"), sorted(tally.caption_models.items())), ""]
    return DataCard("\n".join(lines), totals)
