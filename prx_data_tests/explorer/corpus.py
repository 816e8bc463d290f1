"""A small explored corpus, built by the same plain functions the Dagster assets call.

The demo corpus goes through ingest, captions (the ``source`` backend), labels (MiniLM), phash,
export, the merged index and skip lists, all in this process (executor ``local``: no Ray, no
Dagster). Three things are then done on purpose so the explorer has something to tell apart:

- one photo gets a model caption unlike its source caption (as a VLM re-caption would), so a
  page can show both;
- one duplicate photo is labelled ``nsfw`` (as a stricter classifier might), so a sample is
  skipped for two reasons (the demo holds no nsfw picture, and the CPU labels keep it visual);
- ``photos`` gets the INVERTED index on ``caption`` that table maintenance builds; the other
  tables have none, so a search runs full-text on one source and substring on the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import lance
import pyarrow as pa

from prx_data.core.settings import Settings, load_settings

RECAPTIONED = ("photos", "landscape/coffee.jpg")
MODEL_CAPTION = "A steaming espresso cup on an oak table beside a folded newspaper."
CAPTION_MODEL = "test-vlm-7b"
PROMPT_VERSION = "prompt-v7"
FTS_SOURCE = "photos"
NSFW_LABELLED = ("web", "web-0002")


@dataclass(frozen=True)
class ExploredCorpus:
    root: Path
    settings: Settings
    ids: dict[tuple[str, str], str]  # (source, source_key) -> sample_id

    def sid(self, source: str, key: str) -> str:
        return self.ids[(source, key)]


def build(root: Path) -> ExploredCorpus:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from prx_data.core.lance_io import update_columns
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.exclusion import compute_skips, write_skip_lists
    from prx_data.curation.maintenance import maintain_table
    from prx_data.demo.corpus import build_demo_corpus
    from prx_data.export.corpus_index import merge_all
    from prx_data.imaging.buckets import BucketConfig
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry
    from prx_data.stages.caption_stage import compute_captions
    from prx_data.stages.export_stage import export_source
    from prx_data.stages.label_stage import compute_labels
    from prx_data.stages.phash_stage import compute_phashes

    build_demo_corpus(root)
    settings = load_settings({"PRX_DATA_ROOT": str(root)})
    paths = StoragePaths.from_settings(settings)
    registry = load_registry(settings.sources_dir)
    ids: dict[tuple[str, str], str] = {}
    for name, source in sorted(registry.sources.items()):
        uri = paths.raw_table(name)
        ingest_source(source, uri)
        compute_captions(uri, {"backend": "source"}, executor="local")
        if name == RECAPTIONED[0]:
            _recaption(uri, RECAPTIONED[1], update_columns)
        compute_labels(uri, {"backend": "minilm"}, executor="local")
        if name == NSFW_LABELLED[0]:
            _set_columns(uri, NSFW_LABELLED[1], {"label": "nsfw"}, update_columns)
        compute_phashes(uri, executor="local")
        export_source(uri, name, mds_root=paths.mds_root, exports_uri=paths.exports_table(name), executor="local")
        t = lance.dataset(uri).to_table(columns=["sample_id", "source_key"])
        ids.update({(name, k): s for k, s in zip(t.column("source_key").to_pylist(), t.column("sample_id").to_pylist())})
    merge_all(paths.mds_root)
    _, skips = compute_skips(paths, {n: s.spec.priority for n, s in registry.sources.items()}, bucket_cfg=BucketConfig())
    write_skip_lists(paths.mds_root, skips)
    maintain_table(paths.raw_table(FTS_SOURCE), target_rows_per_fragment=1_000_000, indexes=(("caption", "INVERTED"),))
    return ExploredCorpus(root, settings, ids)


def _set_columns(uri: str, key: str, values: dict, update_columns) -> None:
    ds = lance.dataset(uri)
    sid = ds.to_table(columns=["sample_id"], filter=f"source_key = '{key}'").column("sample_id")[0].as_py()
    update_columns(ds, pa.table({"sample_id": [sid], **{k: [v] for k, v in values.items()}}))


def _recaption(uri: str, key: str, update_columns) -> None:
    ds = lance.dataset(uri)
    sid = ds.to_table(columns=["sample_id"], filter=f"source_key = '{key}'").column("sample_id")[0].as_py()
    update_columns(
        ds,
        pa.table(
            {
                "sample_id": [sid],
                "caption": [MODEL_CAPTION],
                "caption_model": [CAPTION_MODEL],
                "caption_prompt_version": [PROMPT_VERSION],
            }
        ),
    )
