"""Pins what prx_data.compat.streaming_internals relies on in mosaicml-streaming."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

import numpy as np
import pytest
from streaming import MDSWriter, Stream, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

from prx_data.compat import streaming_internals as compat
from prx_data.training.loader import PrxStreamingDataset

BS = 4
COLUMNS = {"sample_id": "str", "payload": "bytes"}


def test_installed_streaming_is_the_version_the_adapter_was_written_for() -> None:
    assert compat.version_mismatch() is None, compat.version_mismatch()


@pytest.fixture(scope="module")
def streams_dir(tmp_path_factory) -> list[str]:
    """Three MDS streams of uneven sizes, several shards each (so partial draws happen)."""
    root = tmp_path_factory.mktemp("mds")
    folders = []
    for s, n in enumerate((37, 22, 45)):
        out = root / f"s{s}"
        with MDSWriter(out=str(out), columns=COLUMNS, size_limit=400) as writer:
            for i in range(n):
                writer.write({"sample_id": f"{s}-{i:03d}", "payload": bytes(20)})
        folders.append(str(out))
    return folders


class _KeptPathAlways(PrxStreamingDataset):
    """The skip-aware resample even with nothing skipped: what runs once anything is."""

    def resample_streams(self, epoch, stream_id=None):
        return self._resample_kept(epoch, stream_id)


def _order(ds: StreamingDataset) -> list[str]:
    it = iter(ds)
    out = [sample["sample_id"] for sample in it]
    it.close()
    if hasattr(ds, "_iterator"):
        ds._iterator.exit()
    return out


def _release(*datasets) -> None:
    del datasets
    gc.collect()
    clean_stale_shared_memory()


WEIGHTS = {
    "none": ({}, {}),
    "repeat": ({"repeat": (2.5, 0.4, 1.0)}, {}),
    "proportion": ({"proportion": (0.5, 0.3, 0.2)}, {"epoch_size": 77}),
}


@pytest.mark.parametrize("batching_method", ["random", "per_stream", "device_per_stream"])
@pytest.mark.parametrize(
    "seed,weights,sampling_method",
    [(0, "none", "balanced"), (7, "repeat", "balanced"), (1234, "proportion", "fixed"), (99, "repeat", "fixed")],
)
def test_skip_aware_epoch_order_equals_the_plain_dataset(streams_dir, batching_method, seed, weights, sampling_method) -> None:
    per_stream, extra = WEIGHTS[weights]

    def streams() -> list[Stream]:
        return [Stream(local=d, **{k: v[i] for k, v in per_stream.items()}) for i, d in enumerate(streams_dir)]

    args = dict(batch_size=BS, shuffle=True, shuffle_seed=seed, batching_method=batching_method, sampling_method=sampling_method, **extra)
    ours = _KeptPathAlways(streams=streams(), require_skiplists=False, **args)
    got, length = _order(ours), len(ours)
    # Later epochs reseed the partial draws: compare their resampling too.
    resampled = [ours.resample_streams(epoch) for epoch in (1, 2)]
    _release(ours)
    plain = StreamingDataset(streams=streams(), **args)
    want = _order(plain)
    assert got == want, f"epoch order differs from streaming {compat.WRITTEN_FOR}'s ({batching_method}, seed {seed})"
    assert length == len(plain)
    for epoch, (units, ids) in zip((1, 2), resampled):
        ref_units, ref_ids = StreamingDataset.resample_streams(plain, epoch)
        assert np.array_equal(units, ref_units) and np.array_equal(ids, ref_ids)
    _release(plain)


def test_reset_weights_restores_what_the_user_gave(streams_dir) -> None:
    stream = Stream(local=streams_dir[0], proportion=0.25)
    Stream.apply_weights([stream, Stream(local=streams_dir[1], proportion=0.75)], np.array([37, 22]), 100, 0)
    assert stream.choose == 25 and stream.repeat is not None
    compat.reset_weights(stream)
    assert stream.proportion == 0.25
    assert "choose" not in stream.__dict__ and "repeat" not in stream.__dict__


def test_download_stream_file_fetches_and_reports_not_found_at_once(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "manifest.json").write_text('{"a": 1}')
    stream = Stream(remote=str(remote), local=str(tmp_path / "cache"), download_retry=3)
    got = compat.download_stream_file(stream, "manifest.json", "scratch/manifest.json")
    assert got == str(tmp_path / "cache" / "scratch" / "manifest.json")
    assert json.loads(Path(got).read_text()) == {"a": 1}
    started = time.monotonic()
    with pytest.raises(FileNotFoundError):
        compat.download_stream_file(stream, "absent.json")
    assert time.monotonic() - started < 1.0  # not-found is an answer, not a failure to retry


def test_what_the_loader_reads_of_the_dataset(streams_dir) -> None:
    plain = StreamingDataset(streams=[Stream(local=streams_dir[0])], batch_size=BS)
    assert compat.dataset_ranks(plain) == compat.world_ranks() == 1  # one process, no distributed job
    assert len(plain) == plain.length == 37
    names = [compat.shard_basename(shard) for shard in plain.shards]
    assert names == [info["raw_data"]["basename"] for info in json.loads(Path(streams_dir[0], "index.json").read_text())["shards"]]
    assert compat.epoch_size_value("2k") == 2000 and compat.epoch_size_value(77) == 77 and compat.epoch_size_value(None) is None
    with pytest.raises(TypeError, match="MDS shards only"):
        compat.shard_basename(object())  # type: ignore[arg-type]
    _release(plain)
