"""MDS shards written and read without mosaicml-streaming: the same bytes, none of its start-up.

Any ``streaming`` submodule runs the package's ``__init__``, which imports torch and
transformers: seconds per fresh Ray worker and ~700 MB of driver RSS, for a file format that is
a header and concatenated bytes. This module writes that format exactly as streaming 0.13's
``MDSWriter`` does (byte-identical shards, equal index entries; tested against it), and reads
samples back exactly as its ``MDSReader`` does. Training still reads with ``StreamingDataset``.

Shard layout (``shard.NNNNN.mds``, uncompressed)::

    uint32 n | uint32 offsets[n + 1] | config JSON (sorted keys) | sample 0 | ... | sample n-1

offsets are absolute file positions; sample i spans ``offsets[i]:offsets[i + 1]``. A sample is
``uint32 size`` for each variable-size column, then each column's bytes, columns sorted by name.

Only the encodings a scalar table needs are supported (bytes, str, ints, floats); image and
pickle encodings are refused at construction, with the list of supported ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from prx_data.core.storage import naming_path

FORMAT = "mds"
VERSION = 2
# streaming 0.13's Writer default; ours always passes one.
DEFAULT_SIZE_LIMIT = 1 << 26
# A closed shard's spool is copied after its header this much at a time.
_COPY_CHUNK = 8 << 20

_SCALARS = {
    name: np.dtype(name)
    for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
}
SUPPORTED_ENCODINGS = ("bytes", "str", "int", *_SCALARS)


def encoded_size(encoding: str) -> int | None:
    """Fixed size of the encoding in bytes, None when variable (``column_sizes`` of the index)."""
    if encoding in _SCALARS:
        return _SCALARS[encoding].itemsize
    if encoding == "int":
        return 8
    if encoding in ("bytes", "str"):
        return None
    raise ValueError(f"MDS encoding {encoding!r} is not supported here; supported: {', '.join(SUPPORTED_ENCODINGS)}")


def encode_value(encoding: str, value: Any, column: str = "?") -> bytes:
    """One column value as streaming's ``mds_encode`` stores it."""
    if isinstance(value, bytes):  # streaming stores bytes unchanged whatever the encoding
        return value
    if encoding == "str":
        if not isinstance(value, str):
            raise TypeError(f"column {column!r} (str) got {type(value).__name__}, not str")
        return value.encode("utf-8")
    if encoding == "int":
        if not isinstance(value, int):
            raise TypeError(f"column {column!r} (int) got {type(value).__name__}, not int")
        return np.int64(value).tobytes()
    if encoding in _SCALARS:
        return _SCALARS[encoding].type(value).tobytes()
    if encoding == "bytes":
        raise TypeError(f"column {column!r} (bytes) got {type(value).__name__}, not bytes")
    raise ValueError(f"MDS encoding {encoding!r} is not supported here; supported: {', '.join(SUPPORTED_ENCODINGS)}")


def decode_value(encoding: str, data: bytes) -> Any:
    """One column value as streaming's ``mds_decode`` returns it (numpy scalars for scalars)."""
    if encoding == "bytes":
        return data
    if encoding == "str":
        return data.decode("utf-8")
    if encoding == "int":
        return int(np.frombuffer(data, np.int64)[0])
    if encoding in _SCALARS:
        return np.frombuffer(data, _SCALARS[encoding])[0]
    raise ValueError(f"MDS encoding {encoding!r} is not supported here; supported: {', '.join(SUPPORTED_ENCODINGS)}")


def _hasher(algo: str) -> Callable[[], Any]:
    """A fresh incremental hasher named as streaming names them (hashlib's, then xxhash's)."""
    if hasattr(hashlib, algo) and not algo.startswith("shake_") and algo in hashlib.algorithms_available:
        return getattr(hashlib, algo)
    import xxhash  # only when an xxh* hash is configured

    if algo in xxhash.algorithms_available:
        return getattr(xxhash, algo)
    raise ValueError(f"unknown shard hash {algo!r}: use a hashlib name (e.g. 'sha1') or an xxhash one (e.g. 'xxh64')")


def index_json(shards: Sequence[Mapping[str, Any]]) -> str:
    """The ``index.json`` text streaming's writer writes for these shard entries."""
    return json.dumps({"version": VERSION, "shards": list(shards)}, sort_keys=True)


class MdsShardWriter:
    """Fills ``out`` (a local folder) with ``shard.NNNNN.mds`` files, as ``MDSWriter`` would.

    ``shards`` lists the index entry of every shard written so far; ``buffered`` is the size the
    open shard will have on disk. Unlike ``MDSWriter`` there are no upload threads (the caller
    moves closed shards) and no ``index.json`` (the commit writes indexes): ``finish`` only
    closes the last shard.

    The open shard's samples are spooled to a file beside it as they come, not held in memory
    (``MDSWriter`` holds them: up to a shard, 128 MB, per open bucket, which made a driver's RSS
    grow with the number of buckets a source feeds). The header needs every sample's size, so
    closing a shard writes the header and copies the spool after it: one local copy per shard.
    """

    extra_bytes_per_sample = 4  # the sample's offset in the header

    def __init__(
        self, out: str, columns: Mapping[str, str], *, hashes: Iterable[str] = (), size_limit: int | None = DEFAULT_SIZE_LIMIT
    ) -> None:
        hashes = list(hashes)
        if hashes != sorted(set(hashes)):
            raise ValueError(f"shard hashes must be unique and sorted (streaming's rule), got {hashes}")
        self._hashers = [_hasher(algo) for algo in hashes]
        if size_limit is not None and not 0 < size_limit < 2**32:
            raise ValueError(f"size_limit must be in (0, 2**32): offsets are uint32, got {size_limit}")
        self.out = out
        self.hashes = hashes
        self.size_limit = size_limit or None
        self.column_names = sorted(columns)
        self.column_encodings = [columns[name] for name in self.column_names]
        self.column_sizes = [encoded_size(encoding) for encoding in self.column_encodings]
        self.config = {
            "version": VERSION,
            "format": FORMAT,
            "compression": None,
            "hashes": self.hashes,
            "size_limit": self.size_limit,
            "column_names": self.column_names,
            "column_encodings": self.column_encodings,
            "column_sizes": self.column_sizes,
        }
        self.config_data = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self.extra_bytes_per_shard = 4 + 4 + len(self.config_data)
        self.shards: list[dict[str, Any]] = []
        self._sizes: list[int] = []  # of the open shard's samples, in the spool in this order
        self._spool: BinaryIO | None = None
        self.buffered = self.extra_bytes_per_shard
        os.makedirs(out, exist_ok=True)

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        sizes = []
        data = []
        for name, encoding, size in zip(self.column_names, self.column_encodings, self.column_sizes):
            if name not in sample:
                raise KeyError(f"sample has no column {name!r} (columns: {self.column_names})")
            datum = encode_value(encoding, sample[name], name)
            if size is None:
                sizes.append(len(datum))
            elif size != len(datum):
                raise ValueError(f"column {name!r} ({encoding}) must encode to {size} bytes, got {len(datum)}")
            data.append(datum)
        return np.array(sizes, np.uint32).tobytes() + b"".join(data)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add a sample; closes the open shard first when the sample would push it past the
        limit (and, as streaming does, when the shard is still empty: an oversized first
        sample leaves an empty shard before it)."""
        encoded = self.encode_sample(sample)
        size = len(encoded) + self.extra_bytes_per_sample
        if self.size_limit and self.size_limit < self.buffered + size:
            self._write_shard()
        with naming_path(self._spool_path()):
            if self._spool is None:
                self._spool = open(self._spool_path(), "wb")
            self._spool.write(encoded)
        self._sizes.append(len(encoded))
        self.buffered += size

    @property
    def open_samples(self) -> int:
        return len(self._sizes)

    def flush_shard(self) -> None:
        """Close the open shard now (no-op when it is empty)."""
        if self._sizes:
            self._write_shard()

    def finish(self) -> list[dict[str, Any]]:
        """Close the last shard; returns every shard's index entry."""
        self.flush_shard()
        return self.shards

    def _spool_path(self) -> str:
        return os.path.join(self.out, f".shard.{len(self.shards):05}.{FORMAT}.spool")

    def _write_shard(self) -> None:
        basename = f"shard.{len(self.shards):05}.{FORMAT}"
        sizes = np.array(self._sizes, np.int64)
        header_size = 4 + 4 * (len(sizes) + 1) + len(self.config_data)
        offsets = np.concatenate([[0], np.cumsum(sizes)]) + header_size
        if offsets[-1] >= 2**32:
            raise ValueError(f"shard {basename} would be {int(offsets[-1])} bytes: MDS offsets are uint32")
        header = [np.uint32(len(sizes)).tobytes(), offsets.astype(np.uint32).tobytes(), self.config_data]
        hashers = [make() for make in self._hashers]
        if self._spool is not None:
            with naming_path(self._spool_path()):
                self._spool.close()
        spool = self._spool_path()
        with naming_path(os.path.join(self.out, basename)), open(os.path.join(self.out, basename), "wb") as fp:
            for piece in header:
                fp.write(piece)
                for hasher in hashers:
                    hasher.update(piece)
            if self._spool is not None:
                with open(spool, "rb") as body:
                    while piece := body.read(_COPY_CHUNK):
                        fp.write(piece)
                        for hasher in hashers:
                            hasher.update(piece)
        if self._spool is not None:
            os.remove(spool)
        raw_data = {
            "basename": basename,
            "bytes": int(offsets[-1]),
            "hashes": {algo: h.hexdigest() for algo, h in zip(self.hashes, hashers)},
        }
        self.shards.append({"samples": len(sizes), "raw_data": raw_data, "zip_data": None, **self.config})
        self._sizes = []
        self._spool = None
        self.buffered = self.extra_bytes_per_shard


class MdsShardReader:
    """Samples of one uncompressed MDS shard file, by index (``MDSReader``'s decoding).

    ``info``: the shard's index entry. A shard whose size differs from its entry's, or an entry
    this module cannot decode, is refused on open with the reason.
    """

    def __init__(self, path: str, info: Mapping[str, Any]) -> None:
        if info.get("format") != FORMAT or info.get("version") != VERSION:
            raise ValueError(f"{path}: index entry is format {info.get('format')!r} version {info.get('version')!r}, not mds version 2")
        if info.get("compression") or info.get("zip_data"):
            raise ValueError(f"{path}: compressed MDS shards ({info.get('compression')}) are not supported here")
        for encoding in info["column_encodings"]:
            encoded_size(encoding)  # refuses unsupported encodings with the list
        self.path = path
        self.samples = int(info["samples"])
        self.column_names = list(info["column_names"])
        self.column_encodings = list(info["column_encodings"])
        self.column_sizes = list(info["column_sizes"])
        self._fp: BinaryIO = open(path, "rb", 0)
        try:
            expected = int(info["raw_data"]["bytes"])
            actual = os.fstat(self._fp.fileno()).st_size
            if actual != expected:
                raise ValueError(f"{path}: shard is {actual} bytes, its index entry says {expected} (truncated or replaced)")
        except BaseException:
            self._fp.close()
            raise

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.decode_sample(self.sample_data(index))

    def sample_data(self, index: int) -> bytes:
        if not 0 <= index < self.samples:
            raise IndexError(f"{self.path}: sample {index} out of range (shard has {self.samples})")
        self._fp.seek((1 + index) * 4)
        begin, end = np.frombuffer(self._fp.read(8), np.uint32)
        self._fp.seek(int(begin))
        return self._fp.read(int(end - begin))

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        sizes = []
        pos = 0
        for size in self.column_sizes:
            if size:
                sizes.append(size)
            else:
                sizes.append(int(np.frombuffer(data[pos : pos + 4], np.uint32)[0]))
                pos += 4
        sample = {}
        for name, encoding, size in zip(self.column_names, self.column_encodings, sizes):
            sample[name] = decode_value(encoding, data[pos : pos + size])
            pos += size
        if pos != len(data):
            raise ValueError(f"{self.path}: sample holds {len(data)} bytes, its columns {pos} (corrupt shard)")
        return sample

    def close(self) -> None:
        self._fp.close()

    def __enter__(self) -> MdsShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
