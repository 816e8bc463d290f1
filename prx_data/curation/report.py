"""The data card: what the current export holds, as Markdown for the UI and a file."""

from __future__ import annotations

import base64
import os
import tempfile
import time
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
from prx_data.curation.card_figures import CardFigures
from prx_data.export.corpus_index import retired_buckets, unpublished_buckets
from prx_data.export.skiplist import DEFAULT_NAMES, SkipNames, iter_root_sidecars, root_sidecar_entries, view_names
from prx_data.export.tree import INDEX_BASENAME, card_chart_path, card_chart_rel, card_figures_path, data_card_path, view_card_path
from prx_data.imaging.buckets import BucketConfig


@dataclass
class DataCard:
    markdown: str
    totals: dict[str, int] = field(default_factory=dict)
    figures: CardFigures | None = None
    charts: dict[str, bytes] = field(default_factory=dict)  # name -> PNG, linked from the Markdown
    chart_seconds: float = 0.0  # what drawing the charts cost
    view: str | None = None  # an ablation view's card (docs/views.md); None: the default cut's

    def write(self, mds_root: str, options: dict | None = None) -> str:
        """Write the data card, its charts and their numbers into the tree at ``mds_root`` (a
        folder or an object-store root, via ``options``); returns the card's path. The charts go
        first, so a card never links a chart that is not there. A view's card has no charts of
        its own: the default card's are the corpus's."""
        if self.view is not None:
            path = view_card_path(mds_root, self.view)
            write_bytes(locate(path, options), self.markdown.encode())
            return path
        for name, png in self.charts.items():
            write_bytes(locate(card_chart_path(mds_root, name), options), png)
        if self.figures is not None:
            write_bytes(locate(card_figures_path(mds_root), options), self.figures.to_json().encode())
        path = data_card_path(mds_root)
        write_bytes(locate(path, options), self.markdown.encode())
        return path

    def embedded_markdown(self) -> str:
        """The Markdown with each chart inline (a ``data:`` URI): the Dagster UI shows the card
        where no file beside it can be fetched."""
        text = self.markdown
        for name, png in self.charts.items():
            text = text.replace(f"]({card_chart_rel(name)})", f"](data:image/png;base64,{base64.b64encode(png).decode()})")
        return text


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


def _unpublished(notes: dict[str, dict]) -> list[str]:
    """Buckets left out of training (too few unskipped samples), with their counts."""
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


_RAW_COLUMNS = ("status", "width", "height", "caption", "caption_model", "caption_prompt_version", "label", "label_model", "colour_space")
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
    figures: CardFigures = field(default_factory=CardFigures)
    max_upscale: float = 4 / 3


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
    """(rows, usable rows) of one raw table, its sizes, captions, labels and colour spaces
    counted into ``tally``."""
    cols = [c for c in _RAW_COLUMNS if c in raw.schema.names]
    rows = ok = 0
    labels = tally.figures.labels.setdefault(source, Counter())
    for batch in scan_text(raw, cols):
        rows += batch.num_rows
        usable = pc.fill_null(pc.equal(_column(batch, "status"), "ok"), False)
        ok += pc.sum(usable).as_py() or 0
        if "width" in batch.schema.names and "height" in batch.schema.names:
            tally.figures.add_sizes(batch.column("width").filter(usable), batch.column("height").filter(usable), tally.max_upscale)
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
        _count_groups(labels, labelled, ["l"], lambda value: value)
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


def _skipped_ids(
    tally: _Tally,
    mds_root: str,
    options: dict | None,
    source: str,
    entries: list[Entry],
    ids: SpilledPartitions | None = None,
    excluded: SpilledPartitions | None = None,
    names: SkipNames = DEFAULT_NAMES,
) -> None:
    """Every reason of the sidecars ``entries`` (of ``source``'s folders) counted into ``tally``;
    the sample ids they skip spilled into ``ids``, and into ``excluded`` unless the reason is
    ``folded`` (a folded original is trained from its copy)."""
    # lazy: pulls in streaming (torch)
    from prx_data.curation.fold import FOLDED

    reasons = tally.figures.skips.setdefault(source, Counter())
    for sidecar in iter_root_sidecars(mds_root, options, entries=entries, names=names):
        tally.reasons[sidecar.reason] += len(sidecar.indices)
        reasons[sidecar.reason] += len(sidecar.indices)
        skipped = pa.table({"sample_id": pa.array(sidecar.sample_ids, pa.string())})
        if ids is not None:
            ids.add(skipped)
        if excluded is not None and sidecar.reason != FOLDED:
            excluded.add(skipped)


def _exported_and_skipped(exported: SpilledPartitions, *skipped: SpilledPartitions) -> tuple[int, ...]:
    """(distinct exported ids, how many of them each of ``skipped`` holds), one sample-id range at
    a time: an id lives in one range, so the counts add up."""
    exported.close()
    for spilled in skipped:
        spilled.close()
    distinct = 0
    hits = [0] * len(skipped)
    for part in range(exported.partitions):
        ids = pc.unique(exported.read(part)["sample_id"])
        distinct += len(ids)
        for i, spilled in enumerate(skipped):
            skips = spilled.read(part)["sample_id"]
            if len(skips):
                hits[i] += pc.sum(pc.is_in(ids, value_set=pc.unique(skips))).as_py() or 0
    return (distinct, *hits)


def _charts_section(card_charts: dict[str, bytes]) -> list[str]:
    # lazy: the titles live with the drawing code
    from prx_data.curation.card_charts import CHARTS

    return [f"![{CHARTS[name]}]({card_chart_rel(name)})\n" for name in card_charts]


def build_data_card(
    paths: StoragePaths,
    sources: list[str],
    *,
    exclude_labels=(),
    options: dict | None = None,
    generated_at: datetime | None = None,
    view: str | None = None,
    bucket_cfg: BucketConfig | None = None,
    charts: bool = True,
) -> DataCard:
    """The card of ``sources`` under ``paths`` (local or object-store roots alike, via ``options``).
    ``generated_at`` (default: now) is the one line that differs between two equal corpora.
    ``bucket_cfg`` (the export's) gives the charts their tiers, floors and grid ratios.

    "Skipped" counts the exported samples any skip list names, ``folded`` ones included (what
    the explorer counts); "trainable" leaves out all but the folded, which train from their copy.

    Tables are scanned in batches and counted in Arrow; what is held across batches is counts.
    A source's exported and skipped sample ids are spilled by sample-id range to a temporary
    folder and counted one range at a time, so memory follows neither a source nor the corpus.
    ``view``: the card of an ablation view's cut (its sidecars instead of the default cut's),
    with the same sections and no charts."""
    names = DEFAULT_NAMES if view is None else view_names(view)
    cfg = bucket_cfg or BucketConfig()
    tally = _Tally(figures=CardFigures.for_config(cfg), max_upscale=cfg.max_upscale)
    # Sidecars sit under <tier>/<HxW>/<source>/: a source's skips are read with its exports.
    sidecars: dict[str, list[Entry]] = {}
    for entry in root_sidecar_entries(locate(paths.mds_root, options), names.glob):
        sidecars.setdefault(entry.name.split("/")[2], []).append(entry)
    per_source: list[tuple[str, int, int, int]] = []
    totals = {"exported": 0, "skipped": 0, "excluded": 0}
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
                excluded_ids = SpilledPartitions(os.path.join(folder, "excluded"), _IDS, bounds)
                exported = _tally_exports(tally, exp, exported_ids)
                _skipped_ids(tally, paths.mds_root, options, source, sidecars.pop(source, []), skipped_ids, excluded_ids, names)
                distinct, skipped, excluded = _exported_and_skipped(exported_ids, skipped_ids, excluded_ids)
            # A sample id hashes its source's name, so ids of two sources never meet: totals add.
            totals["exported"] += distinct
            totals["skipped"] += skipped
            totals["excluded"] += excluded
        per_source.append((source, rows, ok, exported))
    for folder_name, entries in sidecars.items():  # sources not on the card: their skips still count by reason
        _skipped_ids(tally, paths.mds_root, options, folder_name, entries, names=names)
    totals["trainable"] = totals["exported"] - totals["excluded"]
    folded = totals["skipped"] - totals["excluded"]

    notes = unpublished_buckets(paths.mds_root, options)
    tally.figures.buckets = dict(tally.buckets)
    tally.figures.unpublished = sorted(notes)
    started = time.perf_counter()
    drawn: dict[str, bytes] = {}
    if charts and view is None:
        # lazy: matplotlib is imported only by the card's writer
        from prx_data.curation.card_charts import render_charts

        drawn = render_charts(tally.figures)
    chart_seconds = time.perf_counter() - started

    lines = [
        "# Data card" if view is None else f"# Data card: view {view}",
        "",
        f"Generated {(generated_at or datetime.now(UTC)).isoformat(timespec='seconds')}. "
        f"{totals['exported']} samples exported; {totals['skipped']} of them named by a skip list "
        f"({totals['excluded']} left out of training, {folded} folded into a neighbour bucket and "
        f"trained from their copy); **{totals['trainable']} trainable**.",
        "",
        *(["## Charts", "", *_charts_section(drawn)] if drawn else []),
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
        *_unpublished(notes),
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
        "## Skip lists, by reason",
        "Sidecar entries per reason; `folded` originals train from their copy in a neighbour bucket.",
        "",
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
    return DataCard("\n".join(lines), totals, tally.figures, drawn, chart_seconds, view)
