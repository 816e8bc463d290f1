"""The data card: what the current export holds, as Markdown for the UI and a file."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths, join
from prx_data.core.reasons import reason_code
from prx_data.core.storage import locate, write_bytes
from prx_data.export.corpus_index import retired_buckets, unpublished_buckets
from prx_data.export.skiplist import iter_root_sidecars


@dataclass
class DataCard:
    markdown: str
    totals: dict[str, int] = field(default_factory=dict)

    def write(self, folder: str, options: dict | None = None) -> str:
        """Write ``<folder>/data_card.md`` (a folder or an object-store prefix, via ``options``)."""

        path = join(folder, "data_card.md")
        write_bytes(locate(path, options), self.markdown.encode())
        return path


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _skips(mds_root: str, options: dict | None) -> tuple[Counter, set[str]]:
    # lazy: pulls in streaming (torch)
    from prx_data.curation.fold import FOLDED

    reasons: Counter = Counter()
    skipped: set[str] = set()
    for sidecar in iter_root_sidecars(mds_root, options):
        reasons[sidecar.reason] += len(sidecar.indices)
        if sidecar.reason != FOLDED:  # a folded original is trained from its copy
            skipped.update(sidecar.sample_ids)
    return reasons, skipped


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
        "without a bucket index.json, so no trainer streams them.",
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


def build_data_card(
    paths: StoragePaths, sources: list[str], *, exclude_labels=(), options: dict | None = None, generated_at: datetime | None = None
) -> DataCard:
    """The card of ``sources`` under ``paths`` (local or object-store roots alike, via ``options``).
    ``generated_at`` (default: now) is the one line that differs between two equal corpora."""
    per_source: list[tuple[str, int, int, int]] = []
    tiers: Counter[int] = Counter()
    buckets: Counter[str] = Counter()
    labels: Counter[str] = Counter()
    drops: Counter[str] = Counter()
    caption_models: Counter[str] = Counter()
    label_models: Counter[str | None] = Counter()
    words: list[int] = []
    exported_ids: set[str] = set()
    for source in sources:
        raw = open_table(paths.raw_table(source), options)
        if raw is None:
            continue
        names = raw.schema.names
        cols = [c for c in ("status", "caption", "caption_model", "caption_prompt_version", "label", "label_model") if c in names]
        t = raw.to_table(columns=cols).to_pylist()
        ok = sum(1 for r in t if r["status"] == "ok")
        for r in t:
            if r.get("caption"):
                words.append(len(r["caption"].split()))
                caption_models[f"{r.get('caption_model')} / prompt {r.get('caption_prompt_version')}"] += 1
            if r.get("label"):
                labels[r["label"]] += 1
                label_models[r.get("label_model")] += 1
        exported = 0
        exp = open_table(paths.exports_table(source), options)
        if exp is not None:
            for r in exp.to_table(columns=["sample_id", "tier", "bucket", "drop_reason"]).to_pylist():
                if r["drop_reason"]:
                    drops[reason_code(r["drop_reason"])] += 1
                else:
                    exported += 1
                    exported_ids.add(r["sample_id"])
                    tiers[r["tier"]] += 1
                    buckets[f"{r['tier']}/{r['bucket']}"] += 1
        per_source.append((source, len(t), ok, exported))
    reasons, skipped = _skips(paths.mds_root, options)
    skipped &= exported_ids
    totals = {"exported": len(exported_ids), "skipped": len(skipped), "trainable": len(exported_ids - skipped)}

    lines = [
        "# Data card",
        "",
        f"Generated {(generated_at or datetime.now(UTC)).isoformat(timespec='seconds')}. "
        f"{totals['exported']} samples exported, {totals['skipped']} skipped, **{totals['trainable']} trainable**.",
        "",
        "## Sources",
        *_table(("source", "rows", "usable", "exported"), per_source),
        "",
        "## Resolution tiers",
        *_table(("tier", "samples"), sorted(tiers.items())),
        "",
        "## Buckets (tier/HxW)",
        *_table(("bucket", "samples"), sorted(buckets.items())),
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
        *_table(("reason", "samples"), sorted(drops.items())),
        "",
        "## Excluded by skip lists",
        *_table(("reason", "samples"), sorted(reasons.items())),
        "",
        "## Caption labels",
        *_table(("label", "captions"), sorted(labels.items())),
        f"Excluded labels: {', '.join(exclude_labels) or 'none'}. Label models: {dict(label_models)}.",
        "",
        "## Captions",
    ]
    if words:
        q = statistics.quantiles(words, n=10) if len(words) > 1 else [words[0]] * 9
        lines += _table(
            ("min", "p10", "median", "p90", "max"), [(min(words), round(q[0]), statistics.median(words), round(q[8]), max(words))]
        )
    lines += ["", "Captioner and prompt versions:", *_table(("captioner / prompt", "captions"), sorted(caption_models.items())), ""]
    return DataCard("\n".join(lines), totals)
