"""Training loader over the MDS tree that never yields a skipped sample.

``PrxStreamingDataset`` is a ``streaming.StreamingDataset`` whose epoch is built from the kept
samples only. The skip happens in ``resample_streams`` (the one hook every batching method goes
through), before partitioning and shuffling, so streaming's own guarantees still hold on the
filtered epoch: the same seed gives the same order, ``state_dict``/``load_state_dict`` resume
exactly (``sample_in_epoch`` counts kept samples), and ``per_stream`` batching never mixes
buckets. Filtering later (masking ids in a partition) would break resumption.

Stream weights (proportion/repeat/choose, epoch_size) are applied to the kept counts, so
``len(dataset)`` and the epoch size are those of the filtered corpus. When nothing is skipped
the dataset behaves exactly as a plain StreamingDataset (same order, same epoch).

Skip lists come from each bucket's ``skiplists.json`` manifest (see export/skiplist.py). A
missing manifest (when required), a missing, changed, unlisted or malformed sidecar, or a
manifest built against another export of a source, all fail at construction with the file named.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from math import ceil
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from streaming import Stream, StreamingDataLoader, StreamingDataset
from streaming.base.sampling import get_sampling
from streaming.base.util import number_abbrev_to_int

from prx_data.export.corpus_index import check_merged_fresh, merged_source_digests
from prx_data.export.skiplist import MANIFEST_BASENAME, SkiplistError, load_bucket_skips, read_manifest
from prx_data.export.tree import INDEX_BASENAME, list_buckets

Weights = None | Mapping[str, float] | Literal["by_count"]


class SkippedSampleError(KeyError):
    """A skipped sample was requested by global index."""


def _reset_weights(stream: Stream) -> None:
    """Undo ``Stream.apply_weights`` so weights can be derived again (from kept counts)."""
    for name in ("proportion", "repeat", "choose"):
        if name in stream.__dict__:
            delattr(stream, name)
        given = getattr(stream, f"_{name}", None)
        if given is not None:
            setattr(stream, name, given)


class PrxStreamingDataset(StreamingDataset):
    """StreamingDataset that drops every sample listed in the buckets' skip-list sidecars.

    Args:
        require_skiplists: a stream without ``skiplists.json`` is an error (default). With False,
            such a stream is read whole; a manifest that exists is still fully checked.
        decode_images: yield ``image`` as a PIL image instead of the stored JPEG bytes.
        **kwargs: StreamingDataset arguments (``streams`` or ``local``/``remote``, ``batch_size``,
            ``shuffle``, ``shuffle_seed``, ``batching_method``, ``epoch_size`` ...).
    """

    def __init__(self, *, require_skiplists: bool = True, decode_images: bool = False, **kwargs: Any) -> None:
        for stream in kwargs.get("streams") or ():
            _reset_weights(stream)  # lets a list of Streams be reused across datasets
        super().__init__(**kwargs)
        self.decode_images = decode_images
        self.require_skiplists = require_skiplists
        skipped = [self._load_stream_skips(stream_id) for stream_id in range(self.num_streams)]
        skip_ids = np.concatenate(skipped) if skipped else np.empty(0, np.int64)  # sorted global ids
        self.num_skipped = int(skip_ids.size)
        # A bitmap over global ids, as bytes: num_samples/8 bytes, pickles into workers as one
        # buffer, and the per-sample check in get_item is ~50 ns (a searchsorted is ~2 us).
        self._skip_bitmap = b""
        if self.num_skipped:
            mask = np.zeros(self.num_samples, dtype=bool)
            mask[skip_ids] = True
            self._skip_bitmap = np.packbits(mask, bitorder="little").tobytes()
            del mask
        shard_lo = np.searchsorted(skip_ids, self.sample_offset_per_shard, "left")
        shard_hi = np.searchsorted(skip_ids, self.sample_offset_per_shard + self.samples_per_shard, "left")
        self.kept_per_shard = self.samples_per_shard - (shard_hi - shard_lo)
        self.kept_per_stream = np.array(
            [
                self.kept_per_shard[off : off + n].sum()
                for off, n in zip(self.shard_offset_per_stream, self.shards_per_stream)
            ],
            np.int64,
        )
        if self.num_skipped:
            empty = np.flatnonzero(self.kept_per_stream == 0)
            if empty.size:
                names = [self._stream_dir(self.streams[i]) for i in empty]
                raise ValueError(f"every sample of stream(s) {names} is skipped; leave them out")
            for stream in self.streams:
                _reset_weights(stream)
            epoch_size = kwargs.get("epoch_size")
            epoch_size_value = number_abbrev_to_int(epoch_size) if epoch_size else None
            self.epoch_size = Stream.apply_weights(self.streams, self.kept_per_stream, epoch_size_value, self.shuffle_seed)
            self.length = ceil(self.epoch_size / self._parallel_rank_world.num_ranks)

    # Loading skip lists --------------------------------------------------------------------
    @staticmethod
    def _stream_dir(stream: Stream) -> str:
        return os.path.join(stream.local, stream.split or "")

    def _load_stream_skips(self, stream_id: int) -> NDArray[np.int64]:
        stream = self.streams[stream_id]
        local_dir = self._stream_dir(stream)
        first = int(self.shard_offset_per_stream[stream_id])
        shards = self.shards[first : first + int(self.shards_per_stream[stream_id])]
        with open(os.path.join(local_dir, INDEX_BASENAME), "rb") as handle:
            index_digests = merged_source_digests(json.loads(handle.read()))

        fetch: Callable[[str], str] | None = None
        scratch = None
        if stream.remote:
            # Always fetch fresh: a cached manifest from an older build would silently un-skip.
            scratch = f"_prx_skip_fetch/{uuid.uuid4().hex}"
            fetch = lambda rel: stream._download_file(rel, f"{scratch}/{rel}")  # noqa: E731
        try:
            if not stream.remote:
                has_manifest = os.path.exists(os.path.join(local_dir, MANIFEST_BASENAME))
                if index_digests:
                    check_merged_fresh(local_dir)
            else:
                # Only a clean not-found counts as "no manifest"; any other failure (network,
                # permissions) raises, since reading on without the lists would un-skip samples.
                try:
                    fetch(MANIFEST_BASENAME)
                    has_manifest = True
                except FileNotFoundError:
                    has_manifest = False
            if not has_manifest:
                if self.require_skiplists:
                    where = os.path.join(stream.remote or local_dir, stream.split or "", MANIFEST_BASENAME)
                    raise SkiplistError(
                        f"missing skip-list manifest {where}: build skip lists for this tree (skip_lists "
                        "asset) or pass require_skiplists=False"
                    )
                return np.empty(0, np.int64)
            sizes = {shard.raw_data.basename: int(shard.samples) for shard in shards}
            skips = load_bucket_skips(local_dir, shard_samples=sizes, fetch=fetch, expected_sources=index_digests)
        finally:
            if scratch:
                shutil.rmtree(os.path.join(local_dir, scratch), ignore_errors=True)
        offsets = {shard.raw_data.basename: int(self.sample_offset_per_shard[first + i]) for i, shard in enumerate(shards)}
        parts = [offsets[name] + indices for name, indices in skips.skipped.items() if len(indices)]
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    # Epoch construction ---------------------------------------------------------------------
    def _skip_mask(self, start: int, end: int) -> NDArray[np.bool_]:
        """Skip flags of global ids [start, end), unpacked from the bitmap."""
        first, shift = start >> 3, start & 7
        raw = np.frombuffer(self._skip_bitmap, np.uint8, count=((end + 7) >> 3) - first, offset=first)
        return np.unpackbits(raw, bitorder="little")[shift : shift + end - start].view(bool)

    def _kept_ids(self, shard_id: int) -> NDArray[np.int64]:
        start = int(self.sample_offset_per_shard[shard_id])
        end = start + int(self.samples_per_shard[shard_id])
        if self.kept_per_shard[shard_id] == end - start:
            return np.arange(start, end, dtype=np.int64)
        return start + np.flatnonzero(~self._skip_mask(start, end)).astype(np.int64)

    def resample_streams(
        self, epoch: int, stream_id: int | None = None
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """StreamingDataset.resample_streams over kept samples only.

        Same algorithm as streaming 0.13.0's: per shard, whole repeats plus a seeded partial
        draw; only the shard sizes are the kept counts and the drawn ids are kept ids. Shuffle
        units shrink with them (a fully skipped shard contributes no unit).
        """
        if not self.num_skipped:
            return super().resample_streams(epoch, stream_id)
        return self._resample_kept(epoch, stream_id)

    def _resample_kept(self, epoch: int, stream_id: int | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        rng = (
            np.random.default_rng(self.shuffle_seed + epoch)
            if self.sampling_method == "balanced"
            else np.random.default_rng(self.shuffle_seed)
        )
        shuffle_units: list[int] = []
        sample_ids: list[NDArray[np.int64]] = []
        stream_ids = range(self.num_streams) if stream_id is None else [stream_id]
        for sid in stream_ids:
            first = int(self.shard_offset_per_stream[sid])
            shard_ids = first + np.arange(int(self.shards_per_stream[sid]))
            kept_counts = self.kept_per_shard[shard_ids]
            choose_per_shard = np.zeros(len(shard_ids), np.int64)
            nonempty = kept_counts > 0  # get_sampling mis-sizes picks next to empty shards
            choose_per_shard[nonempty] = get_sampling(
                kept_counts[nonempty],
                self.streams[sid].choose,
                self.sampling_granularity,
                self.shuffle_seed,
                epoch,
                self.epoch_seed_change,
            )
            for shard_id, kept, choose in zip(shard_ids, kept_counts, choose_per_shard):
                if not choose:
                    continue
                ids = self._kept_ids(int(shard_id))
                full, partial = divmod(int(choose), int(kept))
                shuffle_units += [int(kept)] * full
                sample_ids += [ids] * full
                if partial:
                    shuffle_units.append(partial)
                    drawn = ids[rng.choice(int(kept), partial, False)]
                    drawn.sort()
                    sample_ids.append(drawn)
        units = np.asarray(shuffle_units, np.int64)
        ids = np.concatenate(sample_ids).astype(np.int64) if sample_ids else np.empty(0, np.int64)
        return units, ids

    def is_skipped(self, sample_id: int) -> bool:
        return bool((self._skip_bitmap[sample_id >> 3] >> (sample_id & 7)) & 1)

    def get_item(self, sample_id: int, retry: int = 7) -> Any:
        # Belt and braces: the epoch never holds skipped ids; random access must not reach them either.
        if self.num_skipped and (self._skip_bitmap[sample_id >> 3] >> (sample_id & 7)) & 1:
            raise SkippedSampleError(f"sample {sample_id} is skipped by the skip lists")
        sample = super().get_item(sample_id, retry)
        if self.decode_images and isinstance(sample.get("image"), bytes):
            from PIL import Image

            sample["image"] = Image.open(io.BytesIO(sample["image"]))
        return sample


# Streams and loader --------------------------------------------------------------------------
def _bucket_count(bucket_dir: str) -> int:
    """Kept samples of a bucket: index samples minus the manifest's skipped count."""
    with open(os.path.join(bucket_dir, INDEX_BASENAME), "rb") as handle:
        total = sum(int(info["samples"]) for info in json.loads(handle.read())["shards"])
    manifest = os.path.join(bucket_dir, MANIFEST_BASENAME)
    if os.path.exists(manifest):
        total -= int(read_manifest(manifest).get("skipped", 0))
    return total


def build_bucket_streams(mds_root: str, weights: Weights = None, **stream_kwargs: Any) -> list[Stream]:
    """One ``Stream`` per bucket folder that has a merged index, in sorted bucket order.

    weights: None (every kept sample once per epoch), a mapping ``"tier/HxW" -> proportion``
    (only the named buckets are streamed; an unknown name is an error), or ``"by_count"``
    (proportions = kept sample counts; useful with a fixed ``epoch_size``).
    ``stream_kwargs`` go to every Stream (e.g. ``download_retry``). Local roots only for now:
    for an object-store root, build Streams with ``remote=<bucket uri>, local=<cache dir>``.
    """
    if "://" in mds_root:
        raise NotImplementedError("listing object-store roots is not supported; build Streams with remote=")
    buckets = {ref.rel: ref.dir(mds_root) for ref in list_buckets(mds_root)}
    buckets = {rel: path for rel, path in buckets.items() if os.path.isfile(os.path.join(path, INDEX_BASENAME))}
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(buckets))
        if unknown:
            raise ValueError(f"weights name buckets without a merged index under {mds_root}: {unknown}")
        return [Stream(local=buckets[rel], proportion=float(weights[rel]), **stream_kwargs) for rel in sorted(weights)]
    if weights == "by_count":
        counts = {rel: _bucket_count(path) for rel, path in buckets.items()}
        total = sum(counts.values()) or 1
        return [
            Stream(local=path, proportion=counts[rel] / total, **stream_kwargs)
            for rel, path in sorted(buckets.items())
            if counts[rel]
        ]
    if weights is not None:
        raise ValueError(f"weights must be None, a mapping or 'by_count', got {weights!r}")
    return [Stream(local=path, **stream_kwargs) for _, path in sorted(buckets.items())]


def make_loader(
    mds_root: str,
    *,
    batch_size: int,
    weights: Weights = None,
    shuffle: bool = True,
    shuffle_seed: int = 9176,
    num_workers: int = 0,
    batching_method: str = "per_stream",
    require_skiplists: bool = True,
    decode_images: bool = False,
    collate_fn: Callable | None = None,
    streams: Sequence[Stream] | None = None,
    **dataset_kwargs: Any,
) -> StreamingDataLoader:
    """A StreamingDataLoader (checkpointable) over every bucket, one shape per batch by default."""
    dataset = PrxStreamingDataset(
        streams=list(streams) if streams is not None else build_bucket_streams(mds_root, weights),
        batch_size=batch_size,
        shuffle=shuffle,
        shuffle_seed=shuffle_seed,
        batching_method=batching_method,
        require_skiplists=require_skiplists,
        decode_images=decode_images,
        **dataset_kwargs,
    )
    return StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_fn)
