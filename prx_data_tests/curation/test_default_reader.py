"""Safe defaults for PRX's reader (issue 22, item 9): a corpus exported with the default settings
streams in PRX's ``device_per_stream`` reader (``prx_style_epoch``: each published bucket folder
one ``streaming.Stream``, as Photoroom/PRX ``prx/dataset/`` builds them) at per-device batch
sizes up to 32 without an error and without losing an eligible sample.

The corpus (tier 512): 40 images at 4:3 (576x464) and 34 square (512x512) fill their buckets;
5 at 680x480 (432x608, one aspect step from 464x576) and 3 at 480x600 (576x464, two steps from square)
are sparse under the default ``min_stream_samples``; with the defaults they are folded."""

from __future__ import annotations

import pytest

from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.curation.exclusion import compute_skips, write_skip_lists
from prx_data.curation.fold import FoldPolicy, apply_fold_policy
from prx_data.export.corpus_index import merge_all, unpublished_buckets
from prx_data.export.mds_writer import MdsWriterConfig
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages.export_stage import export_source
from prx_data_tests.curation.test_fold import raw_item
from prx_data_tests.export.rawtables import write_raw
from prx_data_tests.export.trainable import prx_style_epoch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ITEMS = (
    [raw_item(f"wide{i}", i, 640, 480) for i in range(40)]
    + [raw_item(f"square{i}", 100 + i, 600, 600) for i in range(34)]
    + [raw_item(f"sparse{i}", 200 + i, 680, 480) for i in range(5)]
    + [raw_item(f"tall{i}", 300 + i, 480, 600) for i in range(3)]
)


@pytest.fixture
def default_settings(tmp_path, monkeypatch):
    """The settings a user gets with nothing set (the fixtures' publication pin removed)."""
    import os

    for name in list(os.environ):
        if name.startswith("PRX_") and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PRX_DATA_ROOT", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def _export_with(settings) -> StoragePaths:
    """mds_shards, corpus_index, skip_lists (with the fold): the corpus job's order."""
    paths = StoragePaths.from_settings(settings)
    write_raw(paths.raw_table("alpha"), "alpha", ITEMS)
    export_source(paths.raw_table("alpha"), "alpha", mds_root=paths.mds_root, exports_uri=paths.exports_table("alpha"), executor="local")
    merge_all(paths.mds_root, min_stream_samples=settings.min_stream_samples, gc_min_age_s=0)
    exports, skips = compute_skips(paths, {"alpha": 1}, bucket_cfg=BucketConfig())
    skips, _ = apply_fold_policy(
        paths,
        exports,
        skips,
        sources=["alpha"],
        bucket_cfg=BucketConfig(),
        writer_cfg=MdsWriterConfig(),
        policy=FoldPolicy.from_settings(settings),
        run_id="test-run",
    )
    write_skip_lists(paths.mds_root, skips)
    merge_all(paths.mds_root, min_stream_samples=settings.min_stream_samples, gc_min_age_s=0)
    return paths


@pytest.mark.parametrize("batch_size", [4, 32])
def test_the_default_export_streams_in_prx_device_per_stream_reader(default_settings, batch_size):
    assert default_settings.min_stream_samples >= 32 and default_settings.fold_sparse_buckets
    paths = _export_with(default_settings)
    every = {sample_id("alpha", it["key"]) for it in ITEMS}

    batches = prx_style_epoch([f"{paths.mds_root}/512"], batch_size)  # raised on the old defaults
    ids = [s for b in batches for s in b]
    assert ids and len(ids) == len(set(ids)) and all(len(b) == batch_size for b in batches)
    # Nothing lost: every sample sits in a published stream (folded ones through their copy), so a
    # device_per_stream epoch only ever drops each stream's last partial batch, never a bucket.
    notes = unpublished_buckets(paths.mds_root)
    assert all(n["unskipped"] == 0 for n in notes.values()), notes
    full_batches = [40 + 5, 34 + 3]  # each published stream, its folded copies included
    assert len(ids) == sum(n // batch_size * batch_size for n in full_batches)
    assert set(ids) <= every
    assert len(every) == sum(full_batches)
