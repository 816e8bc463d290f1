"""URL ingest against img2dataset (issue 24): the same JPEGs, the same slow local server.

    .venv/bin/python -m benchmarks.bench_url_ingest --n 1000

A local HTTP/1.1 server (keep-alive, loopback only) answers each request after 50-150 ms and
serves ~200 KB photo-like JPEGs, once from one host (127.0.0.1) and once spread over 20 hosts
(127.0.0.1 .. 127.0.0.20, one server each). Per list, in the same run:

- ``raw_samples`` step alone: ``ingest_source`` on a JSONL URL list (``workers: 1``, default
  download settings; the spec allows 127.0.0.0/8);
- ``prx-data run``, the whole command as a fresh process (start-up, every stage, shutdown),
  with the time from its start to the server's first request;
- img2dataset 1.47.0 (``pip install .[bench]``) as a fresh process, copying bytes
  (``--resize_mode no``, 2 processes x 64 threads), with its time to first request.

It prints images/s for each and the ratio of ``raw_samples`` to img2dataset (goal >= 1.0).
``--skip-run`` leaves out the whole ``prx-data run`` (the slowest part).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WINDOW: dict[str, float] = {}


def make_jpegs(count: int, target: int = 200_000) -> list[bytes]:
    """Distinct photo-like JPEGs near ``target`` bytes (smooth fields plus grain)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        h, w = 768, 1024
        y, x = np.mgrid[0:h, 0:w] / 100.0
        base = np.stack([np.sin(x * rng.uniform(0.3, 2) + i) + np.cos(y * rng.uniform(0.3, 2)) for _ in range(3)], axis=-1)
        img = ((base - base.min()) / np.ptp(base) * 200 + rng.normal(0, 9, (h, w, 3))).clip(0, 255).astype("uint8")
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=80)
        out.append(buf.getvalue())
    return out


class Served:
    """Servers on loopback addresses, each request answered after 50-150 ms."""

    def __init__(self, hosts: int, images: list[bytes]) -> None:
        self.images = images
        self.first_request: float | None = None
        self.last_answer: float | None = None
        self.requests = 0
        self.lock = threading.Lock()
        self.servers = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                with outer.lock:
                    outer.requests += 1
                    if outer.first_request is None:
                        outer.first_request = time.monotonic()
                time.sleep(random.uniform(0.05, 0.15))
                try:
                    body = outer.images[int(self.path.rsplit("/", 1)[-1].split(".")[0]) % len(outer.images)]
                except ValueError:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with outer.lock:
                    outer.last_answer = time.monotonic()

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        for h in range(hosts):
            server = Server((f"127.0.0.{h + 1}", 0), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    def urls(self, n: int, offset: int = 0) -> list[str]:
        # A fresh offset per measurement: no tool may be served from an earlier run's state.
        return [f"http://{s.server_address[0]}:{s.server_address[1]}/{offset + i}.jpg" for i, s in zip(range(n), self._cycle())]

    def _cycle(self):
        while True:
            yield from self.servers

    def reset(self) -> None:
        with self.lock:
            self.first_request, self.last_answer, self.requests = None, None, 0

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


def write_spec(root: Path, urls: list[str]) -> None:
    (root / "sources").mkdir(parents=True, exist_ok=True)
    (root / "urls.jsonl").write_text("".join(json.dumps({"id": f"k{i}", "u": u, "c": f"photo {i}"}) + "\n" for i, u in enumerate(urls)))
    spec = {
        "name": "urls",
        "shape": "jsonl",
        "location": str(root / "urls.jsonl"),
        "fields": {"key": "id", "image": "u", "image_kind": "url", "caption": "c"},
        "download": {"allow_networks": ["127.0.0.0/8"]},
    }
    (root / "sources" / "urls.yaml").write_text(json.dumps(spec))


def raw_samples(served: Served, urls: list[str], tmp: Path) -> tuple[float, float]:
    from prx_data.ingest.ingest import ingest_source
    from prx_data.ingest.registry import load_registry

    root = tmp / "step"
    shutil.rmtree(root, ignore_errors=True)
    write_spec(root, urls)
    source = load_registry(root / "sources").sources["urls"]
    served.reset()
    started = time.monotonic()
    stats = ingest_source(source, str(root / "raw.lance"))
    wall = time.monotonic() - started
    assert stats.rows_by_status.get("ok") == len(urls), stats.rows_by_status
    return wall, served.first_request - started


def prx_run(served: Served, urls: list[str], tmp: Path) -> tuple[float, float]:
    root = tmp / "run"
    shutil.rmtree(root, ignore_errors=True)
    write_spec(root, urls)
    served.reset()
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root)],
        check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - started, served.first_request - started


def img2dataset(served: Served, urls: list[str], tmp: Path) -> tuple[float, float]:
    out = tmp / "i2d"
    shutil.rmtree(out, ignore_errors=True)
    (tmp / "urls.txt").write_text("\n".join(urls) + "\n")
    served.reset()
    started = time.monotonic()
    subprocess.run(
        [
            str(Path(sys.executable).parent / "img2dataset"), "--url_list", str(tmp / "urls.txt"), "--input_format", "txt",
            "--output_folder", str(out), "--output_format", "files", "--resize_mode", "no", "--processes_count", "2",
            "--thread_count", "64", "--disable_all_reencoding", "True", "--enable_wandb", "False",
            "--number_sample_per_shard", "1000",
        ],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    got = len(list(out.rglob("*.jpg")))
    assert got == len(urls), f"img2dataset saved {got} of {len(urls)}"
    # Its download window (first request to last answer): the rate once its start-up is paid.
    WINDOW["img2dataset"] = len(urls) / (served.last_answer - served.first_request)
    return wall, served.first_request - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="images per list (default 1000)")
    parser.add_argument("--skip-run", action="store_true", help="leave out the whole `prx-data run`")
    args = parser.parse_args()
    images = make_jpegs(40)
    print(f"{args.n} URLs per list, JPEGs of {sum(map(len, images)) / len(images) / 1000:.0f} KB on average, 50-150 ms per request")
    tmp = Path(tempfile.mkdtemp(prefix="bench-url-"))
    offset = 0
    try:
        for hosts in (1, 20):
            served = Served(hosts, images)
            try:
                rows = {}
                for name, fn in (("img2dataset", img2dataset), ("raw_samples step", raw_samples), ("prx-data run", prx_run)):
                    if name == "prx-data run" and args.skip_run:
                        continue
                    offset += args.n
                    wall, first = fn(served, served.urls(args.n, offset), tmp)
                    rows[name] = args.n / wall
                    print(f"  {hosts:>2} host(s) | {name:<17} {wall:6.1f}s  {args.n / wall:7.1f} img/s  first request after {first:.2f}s")
                ratio = rows["raw_samples step"] / rows["img2dataset"]
                window = rows["raw_samples step"] / WINDOW["img2dataset"]
                print(f"  {hosts:>2} host(s) | img2dataset download window alone: {WINDOW['img2dataset']:.1f} img/s")
                print(f"  {hosts:>2} host(s) | raw_samples / img2dataset: {ratio:.2f}x whole command, {window:.2f}x its download window (goal >= 1.0)")
                if "prx-data run" in rows:
                    print(f"  {hosts:>2} host(s) | prx-data run / img2dataset: {rows['prx-data run'] / rows['img2dataset']:.2f}x")
            finally:
                served.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
