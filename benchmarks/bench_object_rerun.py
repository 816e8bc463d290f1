"""A re-run of an object-store source after a few objects were added: signatures vs reading all.

An image folder of N small JPEGs on moto's S3 server (loopback), ingested once; then, per
repeat, ``--added`` objects are uploaded and the source is ingested again two ways in the same
process: as shipped (objects whose ETag and size match the unit manifest are not opened) and
with ``reread_unchanged=True`` (every object opened: the behaviour before the manifest). Prints
median seconds, objects opened (``ObjectRoot.open`` calls) and the ratio old / new.

    .venv/bin/python benchmarks/bench_object_rerun.py [--n 2000] [--added 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import tempfile
import time
from pathlib import Path

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.read import object_store
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--added", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
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
    opened = {"n": 0}
    real_open = object_store.ObjectRoot.open

    def counting_open(self, path, **kw):
        opened["n"] += 1
        return real_open(self, path, **kw)

    object_store.ObjectRoot.open = counting_open  # type: ignore[method-assign]
    try:
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        for i in range(args.n):
            client.put_object(Bucket="bench", Key=f"src/{i:07d}.jpg", Body=images.jpeg(48, 32, seed=i))
        with tempfile.TemporaryDirectory() as tmp:
            src = RegisteredSource(SourceSpec(name="bench", shape="image_folder", location="s3://bench/src"), Path(tmp) / "bench.yaml")
            uri = "s3://bench/lance/bench.lance"
            started = time.perf_counter()
            ingest_source(src, uri, storage_options=options, workers=1)
            print(f"first ingest of {args.n} objects: {time.perf_counter() - started:.2f} s")
            results: dict[str, list[tuple[float, int]]] = {"signatures": [], "read all": []}
            next_key = args.n
            for _ in range(args.repeats):
                for mode, force in (("signatures", False), ("read all", True)):
                    for _ in range(args.added):
                        client.put_object(Bucket="bench", Key=f"src/{next_key:07d}.jpg", Body=images.jpeg(48, 32, seed=next_key))
                        next_key += 1
                    opened["n"] = 0
                    started = time.perf_counter()
                    stats = ingest_source(src, uri, storage_options=options, workers=1, reread_unchanged=force)
                    results[mode].append((time.perf_counter() - started, opened["n"]))
                    assert stats.new == args.added, stats
        new_s = statistics.median(s for s, _ in results["signatures"])
        old_s = statistics.median(s for s, _ in results["read all"])
        for mode, runs in results.items():
            print(
                f"re-run after +{args.added} objects, {mode:10s}: median {statistics.median(s for s, _ in runs):.2f} s, "
                f"objects opened {statistics.median(n for _, n in runs):.0f}"
            )
        print(f"ratio read all / signatures: {old_s / new_s:.1f}x (medians of {args.repeats})")
    finally:
        object_store.ObjectRoot.open = real_open  # type: ignore[method-assign]
        server.stop()


if __name__ == "__main__":
    main()
