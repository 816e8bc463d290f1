from __future__ import annotations

import gc
import io
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image
from streaming.base.util import clean_stale_shared_memory

from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import MdsWriterConfig, write_partition

# (tier, height, width); 512x512 and 1024x1024 share an aspect ratio across tiers.
BUCKETS = [(512, 512, 512), (512, 448, 576), (1024, 1024, 1024)]
SMALL = MdsWriterConfig(size_limit=12_000, max_buffered_bytes=10_000_000)


def jpeg_bytes(seed: int, size: tuple[int, int] = (24, 16)) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=92)
    return out.getvalue()


def make_samples(source: str, n: int, seed: int = 0, buckets=BUCKETS) -> list[dict]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        tier, height, width = buckets[int(rng.integers(len(buckets)))]
        samples.append(
            {
                "tier": tier,
                "height": height,
                "width": width,
                "image": jpeg_bytes(seed * 100_003 + i),
                "caption": f"caption {source} {i}",
                "sample_id": f"{source}-{i:05d}",
                "source": source,
                "original_width": 100 + i,
                "original_height": 200 + i,
                "label": "visual",
                "caption_model": "test-model",
            }
        )
    return samples


def build_tree(root: Path, sources: dict[str, int] | None = None) -> pa.Table:
    """Write sources into root, merge indexes, return the concatenated lineage."""
    sources = sources or {"alpha": 70, "beta": 50}
    tables = []
    for k, (source, n) in enumerate(sorted(sources.items())):
        tables.append(write_partition(make_samples(source, n, seed=k + 1), mds_root=str(root), source=source, config=SMALL).lineage)
    merge_all(str(root))
    return pa.concat_tables(tables)


@pytest.fixture(scope="session")
def base_tree(tmp_path_factory) -> tuple[Path, pa.Table]:
    root = tmp_path_factory.mktemp("tree") / "mds"
    return root, build_tree(root)


@pytest.fixture
def tree(base_tree, tmp_path) -> tuple[Path, pa.Table]:
    """A private copy of the shared tree (tests add sidecars to it)."""
    src, lineage = base_tree
    dst = tmp_path / "mds"
    shutil.copytree(src, dst)
    return dst, lineage


@pytest.fixture(autouse=True)
def _clean_shm():
    clean_stale_shared_memory()
    yield
    gc.collect()
    clean_stale_shared_memory()
