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

The bucket index is checked before streaming reads it (``export/index_check.py``): a shard
basename that would leave the bucket folder (or, on an object-store root, the cache folder the
download lands in), a sample count its shard cannot hold, or an index, manifest or sidecar over
its size cap fails at construction with the file named, before any shard is read or written.
A shard that is gone while an epoch runs (garbage collected after its retention, or deleted)
fails the epoch with ``ShardUnavailableError`` naming the file and the reason, and streaming's
background threads are stopped so the process can exit.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import ceil
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from streaming import Stream, StreamingDataLoader, StreamingDataset

from prx_data.compat.streaming_internals import (
    configure_downloads,
    dataset_ranks,
    download_stream_file,
    epoch_size_value,
    release_shard,
    resample_kept,
    shard_basename,
    shard_files,
    stop_iteration,
    world_ranks,
)
from prx_data.compat.streaming_internals import reset_weights as _reset_weights
from prx_data.core.storage import file_size, local_path, locate, try_read_bytes
from prx_data.export.corpus_index import check_merged_fresh, merged_source_digests
from prx_data.export.index_check import MAX_INDEX_BYTES, check_size, parse_index, read_local_index
from prx_data.export.skiplist import MANIFEST_BASENAME, SkiplistError, load_bucket_skips, parse_manifest
from prx_data.export.tree import INDEX_BASENAME, UNPUBLISHED_BASENAME, list_buckets, view_manifest_name
from prx_data.training.views import view_counts, view_missing, view_stream_skips

Weights = None | Mapping[str, float] | Literal["by_count"]


class SkippedSampleError(KeyError):
    """A skipped sample was requested by global index."""


class ShardUnavailableError(RuntimeError):
    """A shard the loader's index names cannot be read or downloaded; the message names it."""


def _stream_streams(kwargs: Mapping[str, Any]) -> list[Stream]:
    """The streams a StreamingDataset built from ``kwargs`` reads (its one default stream when
    none are given), for checking their indexes before it does."""
    if kwargs.get("streams"):
        return list(kwargs["streams"])
    return [Stream(remote=kwargs.get("remote"), local=kwargs.get("local"), split=kwargs.get("split"))]


def check_stream_index(stream: Stream) -> None:
    """Check a stream's ``index.json`` as streaming is about to read it (``export.index_check``).

    A remote stream's index is downloaded fresh into its cache folder first (streaming then reads
    that very file, so what was checked is what is used); its basenames must stay inside that
    folder, where the shard downloads land. Raises IndexCheckError naming the index.
    """
    folder = os.path.join(stream.local, stream.split or "")
    if stream.remote:
        where = os.path.join(stream.remote, stream.split or "", INDEX_BASENAME)
        os.makedirs(folder, exist_ok=True)
        part = f"{INDEX_BASENAME}.{uuid.uuid4().hex}.part"
        try:
            download_stream_file(stream, INDEX_BASENAME, part)
            read_local_index(folder, where, filename=part)
        except BaseException:
            try:
                os.remove(os.path.join(folder, part))
            except FileNotFoundError:
                pass
            raise
        os.replace(os.path.join(folder, part), os.path.join(folder, INDEX_BASENAME))
    else:
        read_local_index(folder)


class PrxStreamingDataset(StreamingDataset):
    """StreamingDataset that drops every sample listed in the buckets' skip-list sidecars.

    Args:
        require_skiplists: a stream without ``skiplists.json`` is an error (default). With False,
            such a stream is read whole; a manifest that exists is still fully checked.
        decode_images: yield ``image`` as a PIL image instead of the stored JPEG bytes.
        view: an ablation view's cut instead of the default one (docs/views.md); its manifest is
            always required, and the default cut's opt-outs always apply.
        **kwargs: StreamingDataset arguments (``streams`` or ``local``/``remote``, ``batch_size``,
            ``shuffle``, ``shuffle_seed``, ``batching_method``, ``epoch_size`` ...).
    """

    def __init__(self, *, require_skiplists: bool = True, decode_images: bool = False, view: str | None = None, **kwargs: Any) -> None:
        for stream in kwargs.get("streams") or ():
            _reset_weights(stream)  # lets a list of Streams be reused across datasets
        for stream in _stream_streams(kwargs):
            check_stream_index(stream)
        self._failure: ShardUnavailableError | None = None
        super().__init__(**kwargs)
        self.decode_images = decode_images
        self.require_skiplists = require_skiplists
        self.view = view
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
            [self.kept_per_shard[off : off + n].sum() for off, n in zip(self.shard_offset_per_stream, self.shards_per_stream)],
            np.int64,
        )
        if self.num_skipped:
            empty = np.flatnonzero(self.kept_per_stream == 0)
            if empty.size:
                names = [self._stream_dir(self.streams[i]) for i in empty]
                raise ValueError(f"every sample of stream(s) {names} is skipped; leave them out")
            for stream in self.streams:
                _reset_weights(stream)
            epoch_size = epoch_size_value(kwargs.get("epoch_size"))
            self.epoch_size = Stream.apply_weights(self.streams, self.kept_per_stream, epoch_size, self.shuffle_seed)
            self.length = ceil(self.epoch_size / dataset_ranks(self))

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
            fetch = lambda rel: download_stream_file(stream, rel, f"{scratch}/{rel}")  # noqa: E731
        manifest_name = view_manifest_name(self.view) if self.view else MANIFEST_BASENAME
        try:
            if not stream.remote:
                has_manifest = os.path.exists(os.path.join(local_dir, manifest_name))
                if index_digests:
                    check_merged_fresh(local_dir)
            else:
                # Only a clean not-found counts as "no manifest"; any other failure (network,
                # permissions) raises, since reading on without the lists would un-skip samples.
                assert fetch is not None, "set above for every remote stream"
                try:
                    fetch(manifest_name)
                    has_manifest = True
                except FileNotFoundError:
                    has_manifest = False
            if not has_manifest:
                if self.view:
                    raise view_missing(self.view, os.path.join(stream.remote or local_dir, stream.split or "", manifest_name))
                if self.require_skiplists:
                    where = os.path.join(stream.remote or local_dir, stream.split or "", MANIFEST_BASENAME)
                    raise SkiplistError(
                        f"missing skip-list manifest {where}: build skip lists for this tree (skip_lists "
                        "asset) or pass require_skiplists=False"
                    )
                return np.empty(0, np.int64)
            sizes = {shard_basename(shard): int(shard.samples) for shard in shards}
            if self.view:
                skipped = view_stream_skips(local_dir, self.view, sizes, fetch, index_digests)
            else:
                skipped = load_bucket_skips(local_dir, shard_samples=sizes, fetch=fetch, expected_sources=index_digests).skipped
        finally:
            if scratch:
                shutil.rmtree(os.path.join(local_dir, scratch), ignore_errors=True)
        offsets = {shard_basename(shard): int(self.sample_offset_per_shard[first + i]) for i, shard in enumerate(shards)}
        parts = [offsets[name] + indices for name, indices in skipped.items() if len(indices)]
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

    def resample_streams(self, epoch: int, stream_id: int | None = None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """StreamingDataset.resample_streams over kept samples only.

        Same algorithm as streaming 0.13.0's: per shard, whole repeats plus a seeded partial
        draw; only the shard sizes are the kept counts and the drawn ids are kept ids. Shuffle
        units shrink with them (a fully skipped shard contributes no unit).
        """
        if not self.num_skipped:
            return super().resample_streams(epoch, stream_id)
        return self._resample_kept(epoch, stream_id)

    def _resample_kept(self, epoch: int, stream_id: int | None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        return resample_kept(self, epoch, stream_id, self.kept_per_shard, self._kept_ids)

    def is_skipped(self, sample_id: int) -> bool:
        return bool((self._skip_bitmap[sample_id >> 3] >> (sample_id & 7)) & 1)

    # A shard that cannot be prepared ---------------------------------------------------------
    def prepare_shard(self, shard_id: int, blocking: bool = True) -> None:
        """streaming's prepare_shard, failing with the shard named. The download and ready
        threads call it with ``blocking=False``: there the failure is recorded and the threads
        stopped, and the epoch (``__iter__``) raises it; the main thread raises at once."""
        if self._failure is not None:
            raise self._failure
        try:
            super().prepare_shard(shard_id, blocking)
        except Exception as exc:  # noqa: BLE001 - any failure to prepare a shard ends the epoch, named
            release_shard(self, shard_id)
            self._failure = self._unavailable(shard_id, exc)
            stop_iteration(self)
            if blocking:
                raise self._failure from exc

    def _unavailable(self, shard_id: int, exc: BaseException) -> ShardUnavailableError:
        stream = self.streams[int(self.stream_per_shard[shard_id])]
        basename = shard_files(self.shards[shard_id])[0][0]
        local = os.path.join(stream.local, stream.split or "", basename)
        index = os.path.join(stream.remote or stream.local, stream.split or "", INDEX_BASENAME)
        gone = any(isinstance(e, FileNotFoundError) for e in _chain(exc)) or (not stream.remote and not os.path.exists(local))
        if stream.remote:
            where = os.path.join(stream.remote, stream.split or "", basename)
            what = f"could not be downloaded to {local}"
        else:
            where, what = local, "could not be read"
        why = (
            "it no longer exists: the tree was curated after this loader read its index, and the shard stopped being "
            "published longer ago than the retention (PRX_SHARD_RETENTION_DAYS) or was deleted by hand; "
            "build a new loader over the current index"
            if gone
            else f"{type(exc).__name__}: {exc}"
        )
        return ShardUnavailableError(f"shard {where} (listed in {index}) {what}: {why}")

    def __iter__(self) -> Any:
        if self._failure is not None:
            raise self._failure
        yield from super().__iter__()
        if self._failure is not None:
            raise self._failure

    def get_item(self, sample_id: int, retry: int = 7) -> Any:
        if self._failure is not None:
            raise self._failure
        # Belt and braces: the epoch never holds skipped ids; random access must not reach them either.
        if self.num_skipped and (self._skip_bitmap[sample_id >> 3] >> (sample_id & 7)) & 1:
            raise SkippedSampleError(f"sample {sample_id} is skipped by the skip lists")
        sample = super().get_item(sample_id, retry)
        if self.decode_images and isinstance(sample.get("image"), bytes):
            from PIL import Image

            sample["image"] = Image.open(io.BytesIO(sample["image"]))
        return sample


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


# Streams and loader --------------------------------------------------------------------------
class UntrainableStreamsWarning(UserWarning):
    """Streams left out of a loader because they cannot fill a batch."""


@dataclass(frozen=True)
class BucketStream:
    """A published bucket (a folder with a merged ``index.json``) and its sample counts."""

    rel: str  # "tier/HxW"
    uri: str  # bucket folder or object-store URI
    samples: int
    unskipped: int  # samples minus what the skip-list manifest skips


def _counts(folder: str, storage_options: dict | None = None) -> tuple[int, int] | None:
    """(samples, unskipped) of a stream folder from its index.json and skip-list manifest, or
    None when it has no index.json."""
    loc = locate(folder, storage_options)
    where = loc.child(INDEX_BASENAME).uri
    check_size(file_size(loc.child(INDEX_BASENAME)), MAX_INDEX_BYTES, where)
    raw = try_read_bytes(loc.child(INDEX_BASENAME))
    if raw is None:
        return None
    total = sum(int(info["samples"]) for info in parse_index(raw, where))
    manifest = try_read_bytes(loc.child(MANIFEST_BASENAME))
    skipped = parse_manifest(manifest, loc.child(MANIFEST_BASENAME).uri).skipped if manifest is not None else 0
    return total, total - skipped


def published_buckets(mds_root: str, storage_options: dict | None = None) -> list[BucketStream]:
    """Every bucket of the tree published for training, sorted (local or object-store root).

    Buckets that ``corpus_index`` left unpublished (too few unskipped samples) have no
    ``index.json`` and are not listed.
    """
    found = []
    for ref in list_buckets(mds_root, storage_options):
        uri = ref.dir(mds_root)
        counts = _counts(uri, storage_options)
        if counts is not None:
            found.append(BucketStream(ref.rel, uri, *counts))
    return found


def build_bucket_streams(
    mds_root: str,
    weights: Weights = None,
    *,
    buckets: Sequence[BucketStream] | None = None,
    cache_dir: str | None = None,
    storage_options: dict | None = None,
    **stream_kwargs: Any,
) -> list[Stream]:
    """One ``Stream`` per published bucket (``buckets``, default: all of ``mds_root``), sorted.

    weights: None (every kept sample once per epoch), a mapping ``"tier/HxW" -> proportion``
    (only the named buckets are streamed; a name that is not a published bucket is an error),
    or ``"by_count"`` (proportions = kept sample counts; useful with a fixed ``epoch_size``).
    ``stream_kwargs`` go to every Stream (e.g. ``download_retry``). On an object-store root each
    Stream reads ``remote=<bucket uri>`` into ``<cache_dir>/<tier>/<HxW>`` (a fresh temporary
    folder when ``cache_dir`` is None).
    """
    if buckets is None:
        buckets = published_buckets(mds_root, storage_options)
    by_rel = {b.rel: b for b in buckets}

    def stream(bucket: BucketStream, **extra: Any) -> Stream:
        nonlocal cache_dir
        folder = local_path(bucket.uri)
        if folder is not None:  # streaming reads a local bucket in place
            return Stream(local=folder, **extra, **stream_kwargs)
        cache_dir = cache_dir or tempfile.mkdtemp(prefix="prx-stream-cache-")
        made = Stream(remote=bucket.uri, local=os.path.join(cache_dir, *bucket.rel.split("/")), **extra, **stream_kwargs)
        return configure_downloads(made, storage_options)

    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(by_rel))
        if unknown:
            raise ValueError(f"weights name buckets without a merged index under {mds_root}: {unknown}")
        return [stream(by_rel[rel], proportion=float(weights[rel])) for rel in sorted(weights)]
    if weights == "by_count":
        total = sum(max(0, b.unskipped) for b in buckets) or 1
        return [stream(b, proportion=b.unskipped / total) for b in sorted(buckets, key=lambda b: b.rel) if b.unskipped > 0]
    if weights is not None:
        raise ValueError(f"weights must be None, a mapping or 'by_count', got {weights!r}")
    return [stream(b) for b in sorted(buckets, key=lambda b: b.rel)]


def smallest_trainable_stream(batch_size: int, batching_method: str) -> int:
    """Fewest kept samples a stream needs under ``batching_method``: per-stream batching fills a
    whole global batch (``batch_size`` x ranks) from one stream, and streaming raises otherwise."""
    if batching_method in ("per_stream", "device_per_stream"):
        return batch_size * world_ranks()
    return 1


def _why_untrainable(unskipped: int, need: int) -> str | None:
    if unskipped <= 0:
        return "every sample is skipped"
    if unskipped < need:
        return f"{unskipped} unskipped samples, fewer than one batch of {need}"
    return None


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
    cache_dir: str | None = None,
    storage_options: dict | None = None,
    view: str | None = None,
    views_dir: str | None = None,
    **dataset_kwargs: Any,
) -> StreamingDataLoader:
    """A StreamingDataLoader (checkpointable) over every trainable bucket, one shape per batch.

    Never raises on a legal corpus: streams that cannot fill one batch (fewer unskipped samples
    than ``batch_size`` x ranks under per-stream batching) or whose every sample is skipped are
    left out and named in one ``UntrainableStreamsWarning``; only a corpus with no trainable
    stream at all raises ``ValueError``. ``mds_root`` may be an ``s3://`` / ``gs://`` root
    (buckets are cached under ``cache_dir``). ``storage_options`` (as ``core.settings`` builds
    them) reach every read: the listing, the counts, and each stream's index, skip-list and
    shard downloads, in this process and in DataLoader workers alike, with no ``S3_ENDPOINT_URL``
    needed in the environment (``compat.streaming_internals.configure_downloads``). Streams
    passed in ``streams`` are bound to them too.

    ``view``: train an ablation view's cut (docs/views.md) instead of the default one; a view
    never built, or built before the tree's current export or default cut, raises
    ``training.views.ViewNotReadyError`` naming it. ``views_dir``: where the view files are
    (``PRX_VIEWS_DIR``); when given, a view whose file changed since its build is stale too.
    """
    need = smallest_trainable_stream(batch_size, batching_method)
    left_out: dict[str, str] = {}
    if streams is None:
        buckets = published_buckets(mds_root, storage_options)
        if view is not None:
            in_view = view_counts(mds_root, view, buckets, storage_options, views_dir)
            buckets = [BucketStream(b.rel, b.uri, *in_view[b.rel]) for b in buckets]
        if isinstance(weights, Mapping):
            published = {b.rel for b in buckets}
            in_tree = {ref.rel for ref in list_buckets(mds_root, storage_options)}
            unknown = sorted(set(weights) - in_tree)
            if unknown:
                raise ValueError(f"weights name buckets that are not in {mds_root}: {unknown}")
            left_out.update(
                {rel: f"not published for training (see its {UNPUBLISHED_BASENAME})" for rel in sorted(set(weights) - published)}
            )
            buckets = [b for b in buckets if b.rel in weights]
        trainable = []
        for bucket in buckets:
            why = _why_untrainable(bucket.unskipped, need)
            if why:
                left_out[bucket.rel] = why
            else:
                trainable.append(bucket)
        if isinstance(weights, Mapping):
            weights = {rel: value for rel, value in weights.items() if rel in {b.rel for b in trainable}}
        chosen = (
            build_bucket_streams(mds_root, weights, buckets=trainable, cache_dir=cache_dir, storage_options=storage_options)
            if trainable
            else []
        )
    else:
        chosen = []
        for stream in streams:
            configure_downloads(stream, storage_options)
            folder = os.path.join(stream.remote or stream.local, stream.split or "")
            counts = _counts(folder, storage_options)
            why = None if counts is None else _why_untrainable(counts[1], need)
            if why:
                left_out[folder] = why
            else:
                chosen.append(stream)
    if left_out:
        names = "; ".join(f"{name} ({why})" for name, why in sorted(left_out.items()))
        warnings.warn(
            f"left out {len(left_out)} stream(s) that cannot train at batch size {batch_size}: {names}",
            UntrainableStreamsWarning,
            stacklevel=2,
        )
    if not chosen:
        raise ValueError(
            f"nothing to train on under {mds_root} at batch size {batch_size}"
            + (f": every stream was left out ({', '.join(sorted(left_out))})" if left_out else ": no published bucket")
        )
    dataset = PrxStreamingDataset(
        streams=list(chosen),
        batch_size=batch_size,
        shuffle=shuffle,
        shuffle_seed=shuffle_seed,
        batching_method=batching_method,
        require_skiplists=require_skiplists,
        decode_images=decode_images,
        view=view,
        **dataset_kwargs,
    )
    return StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_fn)
