"""mosaicml-streaming: what the skip-aware loader needs beyond its public API.

(The export writes and re-reads MDS shards with ``prx_data.export.mds_format``, not streaming.)
- ``resample_kept``: ``StreamingDataset.resample_streams`` is the documented override point for
  the epoch's sample ids, but it has no notion of skipped samples, so the kept-sample variant
  re-states streaming's algorithm. It must stay sample-for-sample identical to the pinned
  version's when nothing is skipped (tested), or skip-free and skip-aware runs would order
  epochs differently.
- ``reset_weights``: ``Stream.apply_weights`` overwrites the given proportion/repeat/choose with
  derived values; the originals live in private attributes.
- ``download_stream_file`` uses public pieces only (``CloudDownloader``); it replaces
  ``Stream._download_file`` and keeps a not-found answer distinct from a failure.
- ``configure_downloads``: streaming's ``S3Downloader`` reads the endpoint only from the
  ``S3_ENDPOINT_URL`` variable of the process that downloads, and falls back to unsigned
  requests to AWS on a 400 or when no credentials are found. A stream gets a downloader bound
  to the ``storage_options`` it was built with instead (``Stream._downloader``, set in
  ``Stream.__init__`` and pickled into DataLoader workers with the stream), so index, shard and
  skip-list downloads reach the given endpoint with the given keys, and never AWS's default.
- ``shard_files``, ``stop_iteration``, ``release_shard``: a shard's file entries as its reader
  holds them, and the two moves that end an epoch whose shard cannot be prepared: set the
  dataset's stop event (its ``_prepare_thread`` and ``_ready_thread`` poll it; without it the
  ready thread waits forever for the shard and the interpreter cannot exit), and put the
  shard's state back from PREPARING so no waiter spins on it.
- ``shard_basename``, ``epoch_size_value``, ``world_ranks``, ``dataset_ranks``: what the
  loader reads of streaming's internals (``streaming.base``'s shard readers, its epoch-size
  parser, the detected world, the dataset's rank world) to size an epoch over kept samples as
  ``StreamingDataset.__init__`` sizes it over all samples.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import streaming
from numpy.typing import NDArray
from streaming import Stream, StreamingDataset
from streaming.base.dataset import _ShardState
from streaming.base.format.base.reader import JointReader, Reader
from streaming.base.sampling import get_sampling
from streaming.base.storage import CloudDownloader
from streaming.base.storage.download import S3Downloader
from streaming.base.util import number_abbrev_to_int
from streaming.base.world import World

from prx_data.core.s3_retry import boto3_config
from prx_data.core.storage import s3_credentials

# Re-read streaming's resample_streams and Stream.__init__ / apply_weights before changing this
# (and its MDS writer/reader: prx_data_tests/export/test_mds_format.py compares ours with them).
WRITTEN_FOR = "0.13.0"


def reset_weights(stream: Stream) -> None:
    """Undo ``Stream.apply_weights`` so weights can be derived again (from kept counts)."""
    for name in ("proportion", "repeat", "choose"):
        if name in stream.__dict__:
            delattr(stream, name)
        given = getattr(stream, f"_{name}", None)
        if given is not None:
            setattr(stream, name, given)


def download_stream_file(stream: Stream, basename: str, to_basename: str | None = None) -> str:
    """Fetch ``basename`` of a remote stream into its local folder (as ``to_basename``); returns
    the local path. ``FileNotFoundError`` at once when the object does not exist; other failures
    are retried ``stream.download_retry`` times, as streaming retries its own downloads."""
    if stream.remote is None:
        raise ValueError(f"stream at {stream.local} has no remote to download {basename} from")
    remote = os.path.join(stream.remote, stream.split or "", basename)
    local = os.path.join(stream.local, stream.split or "", to_basename or basename)
    # Set by the dataset a stream belongs to (or by the caller); streaming's defaults otherwise.
    attempts = max(1, int(getattr(stream, "download_retry", None) or 2))
    timeout = float(getattr(stream, "download_timeout", None) or 60)
    for attempt in range(1, attempts + 1):
        downloader = _fresh_downloader(stream)
        try:
            downloader.download(remote, local, timeout)
            return local
        except FileNotFoundError:
            raise
        except Exception:
            if attempt == attempts:
                raise
        finally:
            downloader.clean_up()
    raise AssertionError("unreachable")


class ConfiguredS3Downloader(S3Downloader):
    """streaming's S3 downloader with the endpoint, keys and region given, not read from the
    environment; no unsigned fallback (it would retry against AWS with no credentials)."""

    def __init__(self, storage_options: Mapping[str, str]) -> None:
        super().__init__()
        self.storage_options = dict(storage_options)

    def _create_s3_client(self, unsigned: bool = False, timeout: float = 60) -> Any:
        from boto3.session import Session

        self._s3_client = Session().client(
            "s3",
            config=boto3_config(self.storage_options, read_timeout=timeout),
            **s3_credentials(self.storage_options).boto3_kwargs(),
        )

    def _download_file_impl(self, remote: str, local: str, timeout: float) -> None:
        from botocore.exceptions import ClientError

        if self._s3_client is None:
            self._create_s3_client(timeout=timeout)
        assert self._s3_client is not None, "_create_s3_client sets the client"
        obj = urllib.parse.urlparse(remote)
        try:
            self._s3_client.download_file(obj.netloc, obj.path.lstrip("/"), local, Config=_transfer_config())
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey"):
                raise FileNotFoundError(f"object {remote} not found") from exc
            raise


def _transfer_config():
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(use_threads=False)


def configure_downloads(stream: Stream, storage_options: Mapping[str, str] | None) -> Stream:
    """Bind ``stream``'s downloads to ``storage_options`` (an ``s3://`` remote only); returns it."""
    if storage_options and stream.remote and urllib.parse.urlparse(stream.remote).scheme == "s3":
        stream._downloader = ConfiguredS3Downloader(storage_options)
    return stream


def _fresh_downloader(stream: Stream) -> CloudDownloader:
    bound = getattr(stream, "_downloader", None)
    if isinstance(bound, ConfiguredS3Downloader):
        return ConfiguredS3Downloader(bound.storage_options)
    return CloudDownloader.get(stream.remote)


def resample_kept(
    dataset: StreamingDataset,
    epoch: int,
    stream_id: int | None,
    kept_per_shard: NDArray[np.int64],
    kept_ids: Callable[[int], NDArray[np.int64]],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``StreamingDataset.resample_streams`` over kept samples only.

    Same algorithm as streaming 0.13.0's: per shard, whole repeats plus a seeded partial draw;
    only the shard sizes are ``kept_per_shard`` and the drawn ids come from ``kept_ids(shard)``.
    Shuffle units shrink with them (a fully skipped shard contributes no unit).
    """
    rng = (
        np.random.default_rng(dataset.shuffle_seed + epoch)
        if dataset.sampling_method == "balanced"
        else np.random.default_rng(dataset.shuffle_seed)
    )
    shuffle_units: list[int] = []
    sample_ids: list[NDArray[np.int64]] = []
    stream_ids = range(dataset.num_streams) if stream_id is None else [stream_id]
    for sid in stream_ids:
        first = int(dataset.shard_offset_per_stream[sid])
        shard_ids = first + np.arange(int(dataset.shards_per_stream[sid]))
        kept_counts = kept_per_shard[shard_ids]
        choose_per_shard = np.zeros(len(shard_ids), np.int64)
        nonempty = kept_counts > 0  # get_sampling mis-sizes picks next to empty shards
        choose_per_shard[nonempty] = get_sampling(
            kept_counts[nonempty],
            dataset.streams[sid].choose,
            dataset.sampling_granularity,
            dataset.shuffle_seed,
            epoch,
            dataset.epoch_seed_change,
        )
        for shard_id, kept, choose in zip(shard_ids, kept_counts, choose_per_shard):
            if not choose:
                continue
            ids = kept_ids(int(shard_id))
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


def shard_basename(shard: Reader) -> str:
    """The one raw file of an MDS shard (what skip lists name). Exports are MDS, whose shards
    are JointReaders; any other shard type is refused."""
    if not isinstance(shard, JointReader):
        raise TypeError(f"skip lists cover MDS shards only, got a {type(shard).__name__}")
    return shard.raw_data.basename


def shard_files(shard: Reader) -> list[tuple[str, int | None]]:
    """(basename, bytes) of each file of a shard (raw, then zip where there is one)."""
    files = []
    for raw_info, zip_info in shard.file_pairs:
        for info in (raw_info, zip_info):
            if info is not None:
                files.append((info.basename, getattr(info, "bytes", None)))
    return files


def stop_iteration(dataset: StreamingDataset) -> None:
    """Tell the dataset's download and ready threads (and its yield loop) to stop now."""
    event = getattr(dataset, "_event", None)
    if event is not None:
        event.set()


def release_shard(dataset: StreamingDataset, shard_id: int) -> None:
    """Mark a shard whose preparation failed as not present (it stays PREPARING otherwise)."""
    dataset._shard_states[shard_id] = _ShardState.REMOTE


def epoch_size_value(epoch_size: int | str | None) -> int | None:
    """``epoch_size`` as StreamingDataset reads it (``"10k"`` -> 10000); None when not given."""
    return number_abbrev_to_int(epoch_size) if epoch_size else None


def world_ranks() -> int:
    """Ranks of the distributed job this process is in (1 outside one), as streaming detects it."""
    return int(World.detect().num_ranks)


def dataset_ranks(dataset: StreamingDataset) -> int:
    """Ranks ``dataset`` divides its epoch between (its replicated rank world)."""
    return int(dataset._parallel_rank_world.num_ranks)


def version_mismatch() -> str | None:
    """Why the installed streaming may not be the one these adapters were written for, or None."""
    if streaming.__version__ == WRITTEN_FOR:
        return None
    return (
        f"mosaicml-streaming is {streaming.__version__}, prx_data.compat.streaming_internals was "
        f"written for {WRITTEN_FOR}: re-check StreamingDataset.resample_streams (resample_kept "
        "re-states it), the MDS writer/reader (export.mds_format re-states them), Stream.__init__/apply_weights "
        "(reset_weights), CloudDownloader's not-found errors, JointReader.raw_data, number_abbrev_to_int, "
        "World.detect and StreamingDataset._parallel_rank_world, then update WRITTEN_FOR"
    )
