from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from streaming import Stream, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

from prx_data.export.mds_writer import write_partition
from prx_data.export.skiplist import SkiplistError, build_skiplists
from prx_data.training.loader import PrxStreamingDataset, SkippedSampleError, build_bucket_streams, make_loader
from prx_data_tests.export.conftest import SMALL, make_samples
from prx_data_tests.export.test_skiplist import skip_table

BS = 4


def _skip_some(root: Path, lineage: pa.Table, share: float = 0.2, seed: int = 0) -> set[str]:
    rng = np.random.default_rng(seed)
    n = lineage.num_rows
    picks = sorted(rng.choice(n, int(n * share), replace=False).tolist())
    half = len(picks) // 2
    # overlapping reasons: some samples skipped twice
    table = skip_table(
        lineage, {"dedup": picks[:half], "label:nsfw": picks[half - 3 :], "optout:r1": picks[:2]}, kept={p: "kept" for p in picks}
    )
    build_skiplists(table, str(root))
    return {lineage["sample_id"][p].as_py() for p in picks}


def _ds(root: Path, **kwargs) -> PrxStreamingDataset:
    weights = kwargs.pop("weights", None)
    args: dict[str, Any] = dict(batch_size=BS, shuffle=True, shuffle_seed=7, batching_method="per_stream")
    args.update(kwargs)
    return PrxStreamingDataset(streams=build_bucket_streams(str(root), weights), **args)


def _drain(ds, limit: int | None = None) -> list[str]:
    out = []
    it = iter(ds)
    for sample in it:
        out.append(sample["sample_id"])
        if limit is not None and len(out) == limit:
            break
    it.close()
    return out


def _release(ds) -> None:
    if hasattr(ds, "_iterator"):
        ds._iterator.exit()
    del ds
    gc.collect()
    clean_stale_shared_memory()


def _bucket_of(lineage: pa.Table) -> dict[str, str]:
    return {r["sample_id"]: f"{r['tier']}/{r['bucket']}" for r in lineage.to_pylist()}


def test_never_yields_skipped_and_per_stream_batches_are_one_shape(tree) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage)
    ds = _ds(root)
    got = _drain(ds)
    assert not skipped & set(got)
    assert len(got) == len(set(got)) == len(ds) <= lineage.num_rows - len(skipped)
    # per_stream drops each stream's incomplete last batch only
    assert lineage.num_rows - len(skipped) - len(got) < BS * ds.num_streams
    bucket = _bucket_of(lineage)
    for i in range(0, len(got), BS):
        assert len({bucket[s] for s in got[i : i + BS]}) == 1
    # random access refuses skipped samples too
    flags = [ds.is_skipped(i) for i in range(ds.num_samples)]
    assert sum(flags) == ds.num_skipped == len(skipped)
    first = flags.index(True)
    with pytest.raises(SkippedSampleError):
        ds[first]
    assert ds[flags.index(False)]["sample_id"] not in skipped
    ds.decode_images = True
    assert ds[flags.index(False)]["image"].size == (24, 16)  # PIL image on request


def test_random_batching_yields_exactly_the_kept_samples(tree) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage, seed=3)
    ds = _ds(root, batching_method="random")
    got = _drain(ds)
    assert sorted(got) == sorted(set(lineage["sample_id"].to_pylist()) - skipped)
    assert ds.epoch_size == len(got)


def test_mid_epoch_resume_has_no_skipped_and_no_repeats(tree) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage, seed=1)
    ds = _ds(root)
    full = _drain(ds)
    _release(ds)

    ds1 = _ds(root)
    k = 5
    head = _drain(ds1, limit=k * BS)
    state = ds1.state_dict(num_samples=k * BS, from_beginning=False)
    _release(ds1)

    ds2 = _ds(root)
    ds2.load_state_dict(state)
    tail = _drain(ds2)
    _release(ds2)
    assert head + tail == full
    assert not skipped & set(head + tail) and len(set(head + tail)) == len(head + tail)


def test_same_seed_same_order_other_seed_other_order(tree) -> None:
    root, lineage = tree
    _skip_some(root, lineage, seed=2)
    orders = []
    for seed in (11, 11, 12):
        ds = _ds(root, shuffle_seed=seed)
        orders.append(_drain(ds))
        _release(ds)
    assert orders[0] == orders[1] and orders[0] != orders[2]
    assert sorted(orders[0]) == sorted(orders[2])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"batching_method": "random"},
        {"weights": "by_count", "epoch_size": 150},
        {"weights": {"512/512x512": 2.0, "512/448x576": 1.0}, "epoch_size": 60, "batching_method": "random"},
    ],
)
def test_no_skips_means_exactly_the_plain_order(tree, kwargs) -> None:
    root, _ = tree
    build_skiplists(
        pa.table(
            {
                "sample_id": pa.array([], pa.string()),
                "shard": pa.array([], pa.string()),
                "index_in_shard": pa.array([], pa.int64()),
                "reason": pa.array([], pa.string()),
            }
        ),
        str(root),
    )
    ours = _ds(root, **kwargs)
    got = _drain(ours)
    length = len(ours)
    _release(ours)
    weights = kwargs.pop("weights", None)
    args: dict[str, Any] = dict(batch_size=BS, shuffle=True, shuffle_seed=7, batching_method="per_stream")
    args.update(kwargs)
    plain = StreamingDataset(streams=build_bucket_streams(str(root), weights), **args)
    assert _drain(plain) == got and len(plain) == length
    _release(plain)


def test_weights_apply_to_kept_counts_and_upsampling_skips_too(tree) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage, seed=4)
    streams = [Stream(local=s.local, repeat=2.5) for s in build_bucket_streams(str(root))]
    ds = PrxStreamingDataset(streams=streams, batch_size=BS, shuffle=True, batching_method="random")
    got = _drain(ds)
    kept = lineage.num_rows - len(skipped)
    assert not skipped & set(got)
    assert ds.epoch_size == len(got)
    assert abs(len(got) - 2.5 * kept) <= ds.num_streams


def test_remote_stream_fetches_fresh_skip_lists(tree, tmp_path) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage, seed=5)
    streams = [Stream(remote=s.local, local=str(tmp_path / "cache" / str(i))) for i, s in enumerate(build_bucket_streams(str(root)))]
    ds = PrxStreamingDataset(streams=streams, batch_size=BS, batching_method="random")
    got = _drain(ds)
    assert sorted(got) == sorted(set(lineage["sample_id"].to_pylist()) - skipped)
    assert not list((tmp_path / "cache").rglob("_prx_skip_fetch/*"))


def test_missing_or_stale_skip_lists_fail_loudly(tree) -> None:
    root, lineage = tree
    with pytest.raises(SkiplistError, match="missing skip-list manifest .*skiplists.json"):
        _ds(root)
    clean_stale_shared_memory()
    ds = _ds(root, require_skiplists=False)  # explicit opt-out reads everything
    _release(ds)

    _skip_some(root, lineage, seed=6)
    sidecar = next(root.rglob("*.skip.dedup.json"))
    data = sidecar.read_bytes()
    sidecar.unlink()
    with pytest.raises(SkiplistError, match=f"missing skip-list sidecar {sidecar}"):
        _ds(root, require_skiplists=False)
    clean_stale_shared_memory()
    sidecar.write_bytes(data.replace(b'"version":1', b'"version":2'))
    with pytest.raises(SkiplistError, match=str(sidecar)):
        _ds(root)
    clean_stale_shared_memory()
    sidecar.write_bytes(data)

    # the source is re-exported and the bucket index re-merged, but skip lists are not rebuilt
    from prx_data.export.corpus_index import merge_all

    write_partition(make_samples("beta", 50, seed=99), mds_root=str(root), source="beta", config=SMALL)
    merge_all(str(root))
    with pytest.raises(SkiplistError, match="another export"):
        _ds(root)
    clean_stale_shared_memory()


def test_make_loader_batches(tree) -> None:
    root, lineage = tree
    skipped = _skip_some(root, lineage, seed=8)
    loader = make_loader(str(root), batch_size=BS, shuffle_seed=3)
    bucket = _bucket_of(lineage)
    seen = []
    for batch in loader:
        ids = batch["sample_id"]
        assert len(ids) == BS and len({bucket[s] for s in ids}) == 1
        assert all(isinstance(b, bytes) and b[:2] == b"\xff\xd8" for b in batch["image"])
        seen += ids
    assert not skipped & set(seen)
    state = loader.state_dict()
    assert state is not None
    _release(loader.dataset)


@pytest.mark.parametrize("weights", [None, "repeat", "proportion"])
def test_kept_resampling_matches_streaming_when_nothing_is_skipped(tree, weights) -> None:
    """The re-implemented resample (used once anything is skipped) is streaming's algorithm."""
    root, _ = tree
    streams = build_bucket_streams(str(root))
    if weights == "repeat":
        streams = [Stream(local=s.local, repeat=r) for s, r in zip(streams, (2.5, 0.4, 1.0))]
    elif weights == "proportion":
        streams = [Stream(local=s.local, proportion=p) for s, p in zip(streams, (0.5, 0.3, 0.2))]
    extra: dict[str, Any] = {"epoch_size": 77} if weights == "proportion" else {}
    ds = PrxStreamingDataset(streams=streams, batch_size=BS, shuffle=True, require_skiplists=False, **extra)
    assert ds.num_skipped == 0
    for epoch in (0, 3):
        for sid in (None, 0, 1, 2):
            units, ids = ds._resample_kept(epoch, sid)
            ref_units, ref_ids = StreamingDataset.resample_streams(ds, epoch, sid)
            assert np.array_equal(units, ref_units) and np.array_equal(ids, ref_ids)
    _release(ds)


def test_remote_stream_without_manifest_is_refused(tree, tmp_path) -> None:
    root, _ = tree
    streams = [Stream(remote=s.local, local=str(tmp_path / "c" / str(i))) for i, s in enumerate(build_bucket_streams(str(root)))]
    with pytest.raises(SkiplistError, match=f"missing skip-list manifest {streams[0].remote}"):
        PrxStreamingDataset(streams=streams, batch_size=BS)


# A corpus a trainer must not trip over -------------------------------------------------------
@pytest.fixture(scope="module")
def trainable_corpus(tmp_path_factory):
    from prx_data_tests.export.trainable import build_corpus

    return build_corpus(str(tmp_path_factory.mktemp("trainable") / "mds"))


def _check_epoch(corpus, batches: list[list[str]], batch_size: int, *, honours_skips: bool) -> None:
    from prx_data_tests.export.trainable import PUBLISHED

    bucket = corpus.bucket_of()
    members = corpus.kept_by_bucket() if honours_skips else corpus.all_by_bucket()
    ids = [s for b in batches for s in b]
    assert len(ids) == len(set(ids))
    assert {bucket[s] for s in ids} == PUBLISHED  # every published stream trains, no other
    if honours_skips:
        assert not set(ids) & corpus.skipped
    for b in batches:
        assert len(b) == batch_size and len({bucket[s] for s in b}) == 1  # full, one shape
    for rel in PUBLISHED:  # a full epoch: each stream gives all of its full batches
        got = sum(1 for s in ids if bucket[s] == rel)
        assert got == len(members[rel]) // batch_size * batch_size, rel


@pytest.mark.parametrize("batch_size", [1, 4, 6])
def test_project_loader_and_prx_style_reader_train_a_full_epoch(trainable_corpus, batch_size, recwarn) -> None:
    from prx_data_tests.export.trainable import BATCH_SIZES, loader_epoch, prx_style_epoch

    assert batch_size in BATCH_SIZES
    root = trainable_corpus.root
    loader = make_loader(root, batch_size=batch_size, shuffle_seed=5)
    _check_epoch(trainable_corpus, loader_epoch(loader), batch_size, honours_skips=True)
    tiers = [str(p) for p in sorted(Path(root).iterdir()) if p.name.isdigit()]
    with_streams = [t for t in tiers if Path(t).name in {"512", "2048"}]
    _check_epoch(trainable_corpus, prx_style_epoch(with_streams, batch_size), batch_size, honours_skips=False)
    assert not [w for w in recwarn.list if "left out" in str(w.message)]  # nothing too small


def test_loader_leaves_out_streams_too_small_for_the_batch_with_one_warning(trainable_corpus, tmp_path) -> None:
    import shutil

    from prx_data.export.corpus_index import merge_all, merge_bucket_index
    from prx_data.training.loader import UntrainableStreamsWarning
    from prx_data_tests.export.trainable import loader_epoch

    # Published with min_stream_samples=1, the sparse and rare buckets are streams too, and the
    # fully skipped one as well when it was indexed before its skip lists landed (an older
    # export): the loader must leave them out, not raise.
    root = tmp_path / "mds"
    shutil.copytree(trainable_corpus.root, root)
    merge_all(str(root), min_stream_samples=1)
    manifest = root / "1024" / "1024x1024" / "skiplists.json"
    saved = manifest.read_bytes()
    manifest.unlink()
    assert merge_bucket_index(str(manifest.parent), min_stream_samples=1).published
    manifest.write_bytes(saved)
    with pytest.warns(UntrainableStreamsWarning) as caught:
        batches = loader_epoch(make_loader(str(root), batch_size=4, weights="by_count"))
    assert len(caught) == 1
    message = str(caught[0].message)
    for rel in ("512/576x464", "4096/4096x4096", "1024/1024x1024"):
        assert rel in message
    assert "every sample is skipped" in message
    ids = {s for b in batches for s in b}
    assert ids and not ids & trainable_corpus.skipped
    # A batch larger than every stream: nothing is trainable, and that alone raises.
    with pytest.warns(UntrainableStreamsWarning), pytest.raises(ValueError, match="nothing to train on"):
        make_loader(str(root), batch_size=64)
    # Without make_loader's filter, streaming or the dataset raise on this very corpus.
    with pytest.raises(ValueError, match="every sample"):
        PrxStreamingDataset(streams=build_bucket_streams(str(root)), batch_size=4, batching_method="per_stream")
