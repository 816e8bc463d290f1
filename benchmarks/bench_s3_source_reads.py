"""Reading WebDataset tars and JSONL from an S3 endpoint: buffered reads vs the raw object file.

tarfile reads 512-byte headers and seeks between members; on a raw pyarrow S3 file each read
is a ranged GET. ``object_store`` wraps sequential readers in an 8 MiB buffer. This prints the
median seconds (and GET requests, counted by the local S3 server) to read the same tar and JSONL
both ways, and the ratio raw / buffered. The endpoint is moto's S3 server on loopback, so
request latency is far below a real store's: the ratio here is a floor.

    .venv/bin/python benchmarks/bench_s3_source_reads.py [--members 400] [--repeats 3]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import socket
import statistics
import tarfile
import time
from unittest import mock

from prx_data.ingest.read import object_store
from prx_data.ingest.read.jsonl import read_jsonl
from prx_data.ingest.read.webdataset import read_webdataset
from prx_data.ingest.registry import SourceSpec
from prx_data_tests import images


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tar(members: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i in range(members):
            for name, data in ((f"k{i:05d}.jpg", images.jpeg(96, 64, seed=i)), (f"k{i:05d}.txt", f"caption {i}".encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _jsonl(lines: int) -> bytes:
    return b"".join(
        json.dumps({"id": f"j{i}", "img": base64.b64encode(images.jpeg(96, 64, seed=i)).decode()}).encode() + b"\n" for i in range(lines)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    try:
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        client.put_object(Bucket="bench", Key="src/shard.tar", Body=_tar(args.members))
        client.put_object(Bucket="bench", Key="src/rows.jsonl", Body=_jsonl(args.members))
        cases = {
            "webdataset": (SourceSpec(name="b", shape="webdataset", location="s3://bench/src/shard.tar"), read_webdataset),
            "jsonl": (
                SourceSpec(name="b", shape="jsonl", location="s3://bench/src/rows.jsonl", fields={"key": "id", "image": "img"}),
                read_jsonl,
            ),
        }
        for name, (spec, reader) in cases.items():
            timings: dict[str, list[float]] = {"buffered": [], "raw": []}
            reads: dict[str, int] = {}
            for _ in range(args.repeats):
                for mode in ("buffered", "raw"):
                    with mock.patch.object(object_store.ObjectRoot, "open", _opener(reads, mode)):
                        started = time.perf_counter()
                        items = list(reader(spec, spec.location, None, options))
                        timings[mode].append(time.perf_counter() - started)
                    assert len(items) == args.members and not any(i.error for i in items), name
            b, r = statistics.median(timings["buffered"]), statistics.median(timings["raw"])
            print(
                f"{name:<11} {args.members} items: buffered {b:.3f} s, raw {r:.3f} s, ratio raw/buffered {r / b:.1f}x "
                f"(ranged GETs per run: buffered {reads.get('buffered', 0) // args.repeats}, raw {reads.get('raw', 0) // args.repeats})"
            )
    finally:
        server.stop()


def _opener(counts: dict[str, int], mode: str):
    """ObjectRoot.open as shipped (buffered) or without the buffer, counting reads on the
    object (each is one ranged GET on S3)."""

    def open_(self, path, *, random_access=False):
        counted = _Counted(self.loc.fs.open_input_file(path), counts, mode)
        if random_access or mode == "raw":
            return counted
        return io.BufferedReader(counted, object_store.STREAM_BUFFER)

    return open_


class _Counted(io.RawIOBase):
    """A raw file over a pyarrow file that counts reads (each is a GET range on S3)."""

    def __init__(self, handle, counts: dict[str, int], mode: str) -> None:
        self.handle, self.counts, self.mode = handle, counts, mode

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def tell(self) -> int:
        return self.handle.tell()

    def size(self) -> int:
        return self.handle.size()

    def readinto(self, buffer) -> int:
        self.counts[self.mode] = self.counts.get(self.mode, 0) + 1
        data = self.handle.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        self.counts[self.mode] = self.counts.get(self.mode, 0) + 1
        return self.handle.read(n) if n is not None and n >= 0 else self.handle.read()

    def close(self) -> None:
        self.handle.close()
        super().close()


if __name__ == "__main__":
    main()
