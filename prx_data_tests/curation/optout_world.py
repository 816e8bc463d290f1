"""A tiny, real corpus that the opt-out tests drive step by step: JSONL sources of photo-like
images (exact, re-encoded and half-size copies of a few base images), run through the plain
stage functions in-process (ingest with the opt-out matcher, phash, a captioner, export, index
merge, opt-out resolution, skip lists), read back through the training loader.

Kept apart from the tests so the state machine and the object-store test share one pipeline.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
from PIL import Image

from prx_data_tests.images import photo_like

BASE_SIDE = 800  # tier 1024; the half-size copy (400) lands in tier 512
HOSTS = ("a.example.org", "b.example.org", "cdn.example.net")
KINDS = ("exact", "reencode", "half")


@functools.lru_cache(maxsize=64)
def variant_bytes(base: int, kind: str) -> bytes:
    img = photo_like(BASE_SIDE, BASE_SIDE, seed=1000 + base)
    buf = io.BytesIO()
    if kind == "exact":
        img.save(buf, "JPEG", quality=90)
    elif kind == "reencode":
        img.save(buf, "JPEG", quality=75)
    elif kind == "half":
        img.resize((BASE_SIDE // 2, BASE_SIDE // 2), Image.Resampling.LANCZOS).save(buf, "JPEG", quality=90)
    elif kind == "cut":  # the exact copy cut mid-scan, its end-of-image marker put back
        exact = variant_bytes(base, "exact")
        return exact[: len(exact) * 2 // 3] + b"\xff\xd9"
    else:
        raise ValueError(kind)
    return buf.getvalue()


@functools.lru_cache(maxsize=64)
def fingerprint(base: int, kind: str) -> tuple[int, str]:
    """(phash, sha256) of a variant, computed from its bytes."""
    from prx_data.imaging.phash import phash_bytes

    data = variant_bytes(base, kind)
    return phash_bytes(data), hashlib.sha256(data).hexdigest()


@dataclass
class Item:
    variant: tuple[int, str]
    url: str


@dataclass
class World:
    """The corpus on disk plus the pipeline that processes it (local or s3:// roots)."""

    root: Path
    lance_root: str
    mds_root: str
    options: dict | None = None
    sources: dict[str, dict[str, Item]] = field(default_factory=dict)
    captioner: int = 0
    # (source, key) -> the record's caption: absent = the default, None = no caption at all.
    captions: dict[tuple[str, str], str | None] = field(default_factory=dict)
    licenses: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def on_root(cls, storage_root, folder: Path, monkeypatch) -> World:
        """A world whose tables and MDS tree live on ``storage_root`` (local or moto S3), with
        the environment a streaming reader of that root needs."""
        for name, value in storage_root.streaming_env().items():
            monkeypatch.setenv(name, value)
        return cls(root=folder, lance_root=storage_root.uri("lance"), mds_root=storage_root.uri("mds"), options=storage_root.options)

    def __post_init__(self) -> None:
        from prx_data.core.paths import StoragePaths

        (self.root / "sources").mkdir(parents=True, exist_ok=True)
        (self.root / "optout").mkdir(parents=True, exist_ok=True)
        self.paths = StoragePaths(lance_root=self.lance_root, mds_root=self.mds_root)

    @property
    def optout_dir(self) -> str:
        return str(self.root / "optout")

    # Sources on disk -------------------------------------------------------------------------
    def write_source(self, name: str) -> None:
        folder = self.root / "raw" / name
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for key, item in sorted(self.sources[name].items()):
            image = folder / f"{key}.jpg"
            data = variant_bytes(*item.variant)
            if not image.exists() or image.read_bytes() != data:
                image.write_bytes(data)
            record = {"k": key, "path": image.name, "url": item.url, "caption": self.caption_of(name, key)}
            if (name, key) in self.licenses:
                record["lic"] = self.licenses[(name, key)]
            lines.append(json.dumps({k: v for k, v in record.items() if v is not None}))
        for stale in folder.glob("*.jpg"):
            if stale.stem not in self.sources[name]:
                stale.unlink()
        (folder / "items.jsonl").write_text("\n".join(lines) + "\n")
        spec = (
            f"name: {name}\nshape: jsonl\nlocation: ../raw/{name}/items.jsonl\n"
            "fields: {key: k, image: path, image_kind: path, url: url, caption: caption, license: lic}\n"
        )
        spec_path = self.root / "sources" / f"{name}.yaml"
        if not spec_path.exists() or spec_path.read_text() != spec:
            spec_path.write_text(spec)

    def caption_of(self, name: str, key: str) -> str | None:
        return self.captions.get((name, key), f"photo {key} of {name}")

    def priorities(self) -> dict[str, int]:
        return {name: 0 for name in self.sources}

    # Pipeline steps --------------------------------------------------------------------------
    def ingest(self, name: str, run_id: str | None = None) -> None:
        from prx_data.curation.optout.requests import ingest_matcher
        from prx_data.ingest.driver import ingest_source
        from prx_data.ingest.registry import load_registry
        from prx_data.stages.phash_stage import compute_phashes

        registry = load_registry(self.root / "sources")
        uri = self.paths.raw_table(name)
        ingest_source(registry.get(name), uri, storage_options=self.options, optout=ingest_matcher(self.optout_dir), run_id=run_id)
        compute_phashes(uri, executor="local", storage_options=self.options, run_id=run_id)

    def caption(self, name: str, run_id: str | None = None) -> dict | None:
        from prx_data.stages.column_stage import run_column_stage
        from prx_data.stages.executors import make_processor

        fn = functools.partial(caption_rows, self.captioner)
        processor = make_processor(fn, columns=["source_caption"], with_images=False, executor="local")
        run_column_stage(
            self.paths.raw_table(name), captioner_stage(self.captioner), processor, storage_options=self.options, run_id=run_id
        )
        return None

    def export(self, name: str, run_id: str | None = None) -> None:
        from prx_data.stages.export_stage import export_source

        export_source(
            self.paths.raw_table(name),
            name,
            mds_root=self.mds_root,
            exports_uri=self.paths.exports_table(name),
            executor="local",
            storage_options=self.options,
            run_id=run_id,
        )

    def chain(self, name: str) -> None:
        """What the per-source assets do for a new or changed source."""
        self.write_source(name)
        self.ingest(name)
        self.caption(name)
        self.export(name)

    def merge(self) -> None:
        from prx_data.export.corpus_index import merge_all

        if self.options:
            merge_all(self.mds_root, self.options, gc_min_age_s=0)
        else:
            merge_all(self.mds_root)

    def apply(self):
        """``prx-data optout apply``: requests, skip lists, data card; nothing re-exported."""
        from prx_data.curation.refresh import refresh

        return refresh(self.paths, self.optout_dir, self.priorities(), exclude_labels=(), options=self.options, write_card=False)

    def rebuild_skip_lists(self) -> None:
        from prx_data.curation.exclusion import compute_skips, write_skip_lists
        from prx_data.imaging.buckets import BucketConfig

        _, skips = compute_skips(self.paths, self.priorities(), bucket_cfg=BucketConfig(), exclude_labels=(), options=self.options)
        write_skip_lists(self.mds_root, skips, self.options, paths=self.paths)

    def compact(self) -> None:
        from prx_data.curation.maintenance import SOURCE_INDEXES, maintain_table

        for name in self.sources:
            maintain_table(self.paths.raw_table(name), target_rows_per_fragment=1000, indexes=SOURCE_INDEXES, options=self.options)

    # Reading back ----------------------------------------------------------------------------
    def yielded(self, cache: Path | None = None) -> set[str]:
        from streaming.base.util import clean_stale_shared_memory

        from prx_data.export.tree import list_buckets
        from prx_data.training.loader import PrxStreamingDataset

        seen: set[str] = set()
        for ref in list_buckets(self.mds_root, self.options):
            if not self._has_index(ref.rel):  # a bucket every source left (as the loader's streams skip it)
                continue
            clean_stale_shared_memory()
            if self.options:
                assert cache is not None, "a remote root is read through a local cache"
                kwargs = {"remote": f"{self.mds_root}/{ref.rel}", "local": str(cache / ref.rel)}
            else:
                kwargs = {"local": ref.dir(self.mds_root)}
            try:
                ds = _open_dataset(PrxStreamingDataset, kwargs)
            except ValueError as exc:  # every sample of the bucket is skipped
                assert "every sample" in str(exc), exc
                continue
            seen.update(s["sample_id"] for s in ds)
            del ds
            gc.collect()
        clean_stale_shared_memory()
        return seen

    def yielded_samples(self, cache: Path | None = None) -> list[dict]:
        """Every sample the training loader yields (sample_id, caption, label), repeats kept."""
        from streaming.base.util import clean_stale_shared_memory

        from prx_data.export.tree import list_buckets
        from prx_data.training.loader import PrxStreamingDataset

        out: list[dict] = []
        for ref in list_buckets(self.mds_root, self.options):
            if not self._has_index(ref.rel):
                continue
            clean_stale_shared_memory()
            if self.options:
                assert cache is not None, "a remote root is read through a local cache"
                kwargs = {"remote": f"{self.mds_root}/{ref.rel}", "local": str(cache / ref.rel)}
            else:
                kwargs = {"local": ref.dir(self.mds_root)}
            try:
                ds = _open_dataset(PrxStreamingDataset, kwargs)
            except ValueError as exc:
                assert "every sample" in str(exc), exc
                continue
            out.extend({"sample_id": s["sample_id"], "caption": s["caption"], "label": s.get("label")} for s in ds)
            del ds
            gc.collect()
        clean_stale_shared_memory()
        return out

    def _has_index(self, rel: str) -> bool:
        if not self.options:
            return os.path.isfile(os.path.join(self.mds_root, rel, "index.json"))
        from prx_data.core.storage import locate, try_read_bytes

        return try_read_bytes(locate(f"{self.mds_root}/{rel}/index.json", self.options)) is not None

    def exported_and_dedup(self) -> tuple[set[str], set[str]]:
        """Exported sample ids, and those the dedup rule skips (not an opt-out matter)."""
        from prx_data.curation.exclusion import dedup_config, dedup_rows, exported_samples
        from prx_data.imaging.buckets import BucketConfig

        exports = exported_samples(self.paths, self.priorities(), self.options)
        dups = dedup_rows(exports, dedup_config(BucketConfig()))
        return set(exports["sample_id"].to_pylist()), set(dups["sample_id"].to_pylist())


def _open_dataset(cls, kwargs: dict):
    """streaming picks a shared-memory prefix by probing /dev/shm; another process on the same
    machine can take it between the probe and the create (FileExistsError): probe again."""
    from streaming.base.util import clean_stale_shared_memory

    for attempt in range(5):
        try:
            return cls(shuffle=False, batch_size=1, **kwargs)
        except FileExistsError:
            if attempt == 4:
                raise
            clean_stale_shared_memory()


def captioner_stage(version: int):
    from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS
    from prx_data.stages.column_stage import ColumnStage

    return ColumnStage(
        name="caption",
        columns=CAPTION_COLUMNS,
        current={"caption_model": f"test-captioner-{version}", "caption_prompt_version": "p1"},
        invalidates=tuple(f.name for f in LABEL_COLUMNS),
        inputs=("image_sha256", "source_caption"),
    )


def caption_rows(version: int, sample_ids: list[str], _images: list, rows: pa.Table) -> pa.Table:
    """A deterministic CPU captioner: a new version writes different captions."""
    captions = [f"{c or 'an image'} (captioner {version})" for c in rows["source_caption"].to_pylist()]
    n = len(sample_ids)
    return pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.string()),
            "caption": pa.array(captions, pa.string()),
            "caption_model": pa.array([f"test-captioner-{version}"] * n, pa.string()),
            "caption_prompt_version": pa.array(["p1"] * n, pa.string()),
            "caption_error": pa.nulls(n, pa.string()),
        }
    )


def host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


__all__ = ["HOSTS", "KINDS", "World", "fingerprint", "host", "variant_bytes"]
