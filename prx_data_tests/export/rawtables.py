"""Source tables written directly (no ingest): the export reads only these columns, and tests
edit them to play a source that grows, shrinks or gets new captions."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import lance
import pyarrow as pa
from streaming.base.format import reader_from_json

from prx_data.core.ids import sample_id
from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS, raw_schema
from prx_data.export.skiplist import read_shard_skips
from prx_data.export.tree import list_buckets, list_sources
from prx_data_tests import images

# (width, height) that land in distinct 512-tier buckets
SHAPES = [(640, 480), (480, 640), (600, 600)]


def item(key: str, seed: int, caption: str | None = None, shape: int | None = None, status: str = "ok") -> dict:
    w, h = SHAPES[seed % len(SHAPES) if shape is None else shape]
    return {"key": key, "seed": seed, "w": w, "h": h, "caption": f"a photo {key}" if caption is None else caption, "status": status}


def write_raw(uri: str, source: str, items: list[dict], storage_options: dict | None = None) -> None:
    schema = pa.schema([*raw_schema(), *CAPTION_COLUMNS, *LABEL_COLUMNS])
    now = datetime.now(UTC)
    rows = []
    for it in items:
        data = images.jpeg(it["w"], it["h"], seed=it["seed"])
        rows.append(
            {
                "sample_id": sample_id(source, it["key"]),
                "source": source,
                "source_key": it["key"],
                "image": data,
                "image_format": "jpeg",
                "image_sha256": hashlib.sha256(data).hexdigest(),
                "width": it["w"],
                "height": it["h"],
                "status": it["status"],
                "ingested_at": now,
                "caption": it["caption"],
                "caption_model": "source",
                "label": it.get("label", "visual"),
            }
        )
    lance.write_dataset(pa.Table.from_pylist(rows, schema=schema), uri, mode="overwrite", storage_options=storage_options)


def visible_samples(root: str | Path) -> dict[str, dict]:
    """What a trainer would read: every source's shards minus their skip-list sidecars.
    Fails on a sample id seen twice."""
    root = str(root)
    seen: dict[str, dict] = {}
    for ref in list_buckets(root):
        for source in list_sources(ref.dir(root)):
            folder = ref.source_dir(root, source)
            with open(os.path.join(folder, "index.json")) as handle:
                shards = json.load(handle)["shards"]
            for info in shards:
                reader = reader_from_json(folder, None, info)
                skipped = set(read_shard_skips(os.path.join(folder, info["raw_data"]["basename"]), info["samples"]).tolist())
                for i in range(info["samples"]):
                    if i in skipped:
                        continue
                    sample = reader[i]
                    assert sample["sample_id"] not in seen, f"{sample['sample_id']} visible twice"
                    seen[sample["sample_id"]] = {**sample, "bucket": ref.rel}
    return seen
