"""URL ingest against img2dataset (issue 24): the same JPEGs, the same slow local server.

    .venv/bin/python -m benchmarks.bench_url_ingest --n 1000 [--repeat 3] [--skip-run]

A local HTTP/1.1 server (keep-alive, loopback only, in a process of its own so that serving
costs no tool under test any CPU) answers each request after 50-150 ms and serves ~125 KB
photo-like JPEGs, once from one host (127.0.0.1) and once spread over 20 hosts
(127.0.0.1 .. 127.0.0.20, one server each). Per list, interleaved ``--repeat`` times:

- img2dataset 1.47.0 (``pip install .[bench]``) as a fresh process, copying bytes
  (``--resize_mode no``, 2 processes x 64 threads): the baseline; with ``--i2d-decode``, also
  img2dataset opening each image as its default mode does (``cv2.imdecode``, keeping the
  bytes): a check of every image at ingest, which ``raw_samples`` leaves to the hash's decode
  (its probe reads headers and walks the file's structure);
- ``raw_samples`` step alone: ``ingest_source`` on a JSONL URL list (default download
  settings; the spec allows 127.0.0.0/8), in this process with its modules already imported
  (the import time is printed once) and a fresh download session; once per ``--workers`` value
  (default 1 and 2), and once per ``--per-host`` value at workers 1 (default 128: the requests
  img2dataset keeps in flight, where the default ``per_host: 64`` caps a one-host list at
  64 / 0.1 s = 640 img/s). ``workers: 2`` runs the list's 512-URL units as Ray tasks on a local Ray
  started once for the bench (as a run's Ray resource or shared head is) and warmed with one
  small list (both printed); its CPU seconds include the Ray processes (workers, raylet, GCS);
- ``prx-data run``, the whole command as a fresh process (start-up, every stage, shutdown).

For each it prints the median wall time and images/s (start-up included), the download window
(images/s from the server's first request to its last answer), the time from start to the first
request, and CPU seconds (the machine is shared: CPU is the steadier figure); then the ratio of
``raw_samples`` to img2dataset, whole command and download window (goal >= 1.0), and the load
average. ``--skip-run`` leaves out the whole ``prx-data run`` (the slowest part). ``--breakdown`` prints
only the CPU per image of the step's parts instead (download alone, with the probe, the step).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import itertools
import json
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def _serve(hosts: int, images: list[bytes], first, last, count, conn, tls: bool = False) -> None:
    """The servers' process: its own GIL, so serving costs no tool under test any CPU time
    (img2dataset runs in its own processes; ``raw_samples`` runs in the bench's). With ``tls``,
    HTTPS with a certificate from a CA made here (its PEM is sent back with the addresses)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            with first.get_lock():
                count.value += 1
                if not first.value:
                    first.value = time.monotonic()
            time.sleep(random.uniform(0.05, 0.15))
            try:
                body = images[int(self.path.rsplit("/", 1)[-1].split(".")[0]) % len(images)]
            except ValueError:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with first.get_lock():
                last.value = time.monotonic()

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    servers = [Server((f"127.0.0.{h + 1}", 0), Handler) for h in range(hosts)]
    ca_pem = None
    if tls:
        from prx_data_tests.tls_certs import chain

        certs = chain(f"127.0.0.{h + 1}" for h in range(hosts))
        context, ca_pem = certs.server_context(), certs.ca_pem
        for server in servers:
            server.socket = context.wrap_socket(server.socket, server_side=True)
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send(([s.server_address[:2] for s in servers], ca_pem))
    conn.recv()  # until told to stop


class Served:
    """Servers on loopback addresses in a process of their own, each request answered after
    50-150 ms. Times are CLOCK_MONOTONIC, the same clock in every process."""

    def __init__(self, hosts: int, images: list[bytes], tls: bool = False) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with Lance/Ray threads
        self._first, self._last, self._count = ctx.Value("d", 0.0), ctx.Value("d", 0.0), ctx.Value("q", 0)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(hosts, images, self._first, self._last, self._count, child, tls), daemon=True)
        self._proc.start()
        self.addresses, ca_pem = self._conn.recv()
        self.scheme = "https" if tls else "http"
        self.ca_pem: bytes | None = ca_pem  # what a client must trust (tls only)

    @property
    def first_request(self) -> float | None:
        return self._first.value or None

    @property
    def last_answer(self) -> float | None:
        return self._last.value or None

    @property
    def requests(self) -> int:
        return self._count.value

    def urls(self, n: int, offset: int = 0) -> list[str]:
        # A fresh offset per measurement: no tool may be served from an earlier run's state.
        return [f"{self.scheme}://{host}:{port}/{offset + i}.jpg" for i, (host, port) in zip(range(n), itertools.cycle(self.addresses))]

    def reset(self) -> None:
        with self._first.get_lock():
            self._first.value, self._last.value, self._count.value = 0.0, 0.0, 0

    def close(self) -> None:
        self._conn.send("stop")
        self._proc.join(10)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_spec(root: Path, urls: list[str], workers: int = 1, per_host: int | None = None) -> None:
    (root / "sources").mkdir(parents=True, exist_ok=True)
    (root / "urls.jsonl").write_text("".join(json.dumps({"id": f"k{i}", "u": u, "c": f"photo {i}"}) + "\n" for i, u in enumerate(urls)))
    spec = {
        "name": "urls",
        "shape": "jsonl",
        "location": str(root / "urls.jsonl"),
        "fields": {"key": "id", "image": "u", "image_kind": "url", "caption": "c"},
        "download": {"allow_networks": ["127.0.0.0/8"], **({"per_host": per_host} if per_host else {})},
        "workers": workers,
    }
    (root / "sources" / "urls.yaml").write_text(json.dumps(spec))


@dataclass
class Measure:
    wall: float  # seconds, start-up included
    first: float  # seconds from start to the server's first request
    cpu: float  # CPU seconds of the tool (user + system), its processes included
    window: float  # images/s from the first request to the last answer

    def rate(self, n: int) -> float:
        return n / self.wall


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant (the local Ray's raylet, GCS and
    workers), from /proc: Ray workers are not our waited-for children, so rusage misses them."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields_ = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields_[1])
        cpu[int(entry)] = (int(fields_[11]) + int(fields_[12])) / tick
    me, total = os.getpid(), 0.0
    for pid in cpu:
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += cpu[pid]
    return total


def _measure(served: Served, n: int, started: float, wall: float, cpu: float) -> Measure:
    first, last = served.first_request, served.last_answer
    assert first is not None and last is not None, "the server saw no request"
    return Measure(wall, first - started, cpu, n / (last - first))


def raw_samples(served: Served, urls: list[str], tmp: Path, workers: int = 1, per_host: int | None = None) -> Measure:
    """The step in this process, modules already imported (``main`` reports that cost), with a
    fresh download session as a step's own process would have."""
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.http import download_session
    from prx_data.ingest.registry import load_registry

    root = tmp / "step"
    shutil.rmtree(root, ignore_errors=True)
    write_spec(root, urls, workers, per_host)
    source = load_registry(root / "sources").sources["urls"]
    download_session._close_shared()
    served.reset()
    cpu = _tree_cpu()
    started = time.monotonic()
    stats = ingest_source(source, str(root / "raw.lance"))
    wall = time.monotonic() - started
    cpu = _tree_cpu() - cpu
    assert stats.rows_by_status.get("ok") == len(urls), stats.rows_by_status
    # workers > 1 only helps if the list became several units (list_units: URL_UNIT_ITEMS).
    from prx_data.ingest.plan.unit_listing import URL_UNIT_ITEMS

    if workers > 1 and len(urls) > URL_UNIT_ITEMS:
        assert stats.units > 1, f"{len(urls)} URLs were {stats.units} unit(s) with workers {workers}"
    return _measure(served, len(urls), started, wall, cpu)


def prx_run(served: Served, urls: list[str], tmp: Path) -> Measure:
    root = tmp / "run"
    shutil.rmtree(root, ignore_errors=True)
    write_spec(root, urls)
    served.reset()
    cpu = _children_cpu()
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root)],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    return _measure(served, len(urls), started, wall, _children_cpu() - cpu)


def img2dataset(served: Served, urls: list[str], tmp: Path, decode: bool = False) -> Measure:
    """``decode``: img2dataset opens each image as its own check (``cv2.imdecode``, full size) and
    keeps the original bytes (``--skip_reencode True``); otherwise it copies bytes unopened."""
    out = tmp / "i2d"
    shutil.rmtree(out, ignore_errors=True)
    (tmp / "urls.txt").write_text("\n".join(urls) + "\n")
    served.reset()
    cpu = _children_cpu()
    started = time.monotonic()
    subprocess.run(
        [
            str(Path(sys.executable).parent / "img2dataset"),
            "--url_list",
            str(tmp / "urls.txt"),
            "--input_format",
            "txt",
            "--output_folder",
            str(out),
            "--output_format",
            "files",
            "--resize_mode",
            "no",
            "--processes_count",
            "2",
            "--thread_count",
            "64",
            *(["--skip_reencode", "True"] if decode else ["--disable_all_reencoding", "True"]),
            "--enable_wandb",
            "False",
            "--number_sample_per_shard",
            "1000",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    got = len(list(out.rglob("*.jpg")))
    assert got == len(urls), f"img2dataset saved {got} of {len(urls)}"
    return _measure(served, len(urls), started, wall, _children_cpu() - cpu)


def cpu_breakdown(n: int, images: list[bytes], tmp: Path, repeat: int) -> None:
    """CPU per image of the step's parts, one process, one host: the download session alone
    (at three concurrencies), with the probe in its threads (as the step runs it), and the whole
    step at workers 1. The differences say where a worker's CPU goes."""
    from prx_data.ingest.http.download_session import DownloadSession
    from prx_data.ingest.registry import DownloadConfig
    from prx_data.ingest.rows.image_probe import probe_image

    def session(concurrency: int, probe: bool):
        def run(served: Served, urls: list[str], _tmp: Path) -> None:
            then = (lambda r: probe_image(r.data, 10**8)) if probe else None
            config = DownloadConfig(allow_networks=["127.0.0.0/8"], concurrency=concurrency)
            with DownloadSession(config) as sess:
                assert sum(1 for _ in sess.stream(((i, f"k{i}", u) for i, u in enumerate(urls)), then=then)) == len(urls)

        return run

    def client_alone(kind: str):
        """Bare GETs from 64 threads: the HTTP client's own cost, with httpx (the client the step
        used before) as the baseline of ``connection_pool.Pool`` (the one it uses now)."""

        def run(served: Served, urls: list[str], _tmp: Path) -> None:
            import ssl
            from concurrent.futures import ThreadPoolExecutor

            trust = ssl.create_default_context(cadata=served.ca_pem.decode()) if served.ca_pem else None
            if kind == "httpx":
                import httpx

                client = httpx.Client(limits=httpx.Limits(max_keepalive_connections=64), trust_env=False, verify=trust or True)

                def get(url: str) -> int:
                    with client.stream("GET", url) as resp:
                        return sum(len(c) for c in resp.iter_raw())
            else:
                from prx_data.ingest.http.connection_pool import Pool
                from prx_data.ingest.http.netguard import parse_networks

                pool_client = Pool(user_agent="bench", timeout_s=30, allow=parse_networks(["127.0.0.0/8"]), max_idle=64, tls=trust)

                def get(url: str) -> int:
                    with pool_client.get(url) as resp:
                        return len(resp.read())

            with ThreadPoolExecutor(64) as pool:
                assert all(pool.map(get, urls))
            client.close()

        return run

    # Over HTTPS too (most real lists): a server of its own with a CA made for the bench.
    https = [
        ("client alone, HTTPS, httpx.Client", client_alone("httpx")),
        ("client alone, HTTPS, connection_pool.Pool", client_alone("connection_pool")),
    ]
    parts = [
        ("client alone, httpx.Client, 64 threads", client_alone("httpx")),
        ("client alone, connection_pool.Pool, 64 threads", client_alone("connection_pool")),
        *((f"download only, concurrency {c}", session(c, False)) for c in (32, 64, 128)),
        ("download + probe, concurrency 128", session(128, True)),
        ("raw_samples step, workers 1", raw_samples),
    ]
    cpu: dict[str, list[float]] = {name: [] for name, _ in https + parts}
    rate: dict[str, list[float]] = {name: [] for name, _ in https + parts}
    offset = 10**8
    with Served(1, images) as served, Served(1, images, tls=True) as tls:
        for _ in range(repeat):
            for server, name, fn in [(tls, *part) for part in https] + [(served, *part) for part in parts]:
                offset += n
                urls = server.urls(n, offset)
                used, started = time.process_time(), time.monotonic()
                fn(server, urls, tmp)
                rate[name].append(n / (time.monotonic() - started))
                cpu[name].append((time.process_time() - used) / n * 1e3)
    for name, _ in https + parts:
        print(f"  CPU per image | {name:<40} {statistics.median(cpu[name]):.2f} ms  ({statistics.median(rate[name]):.0f} img/s)")


def _median(measures: list[Measure]) -> Measure:
    return Measure(*(statistics.median(getattr(m, f.name) for m in measures) for f in fields(Measure)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="images per list (default 1000)")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per tool and list; medians are printed (default 3)")
    parser.add_argument("--skip-run", action="store_true", help="leave out the whole `prx-data run` (the slowest part)")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 20], help="lists to measure, by number of hosts (default: 1 20)")
    parser.add_argument("--breakdown", action="store_true", help="only print CPU per image of the step's parts (download, probe, rest)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="raw_samples rows, by spec workers (default: 1 2)")
    parser.add_argument(
        "--per-host",
        type=int,
        nargs="*",
        default=[128],
        help="raw_samples rows at workers 1 with download.per_host set (default: 128, img2dataset's 2 x 64 threads in flight)",
    )
    parser.add_argument(
        "--i2d-decode",
        action="store_true",
        help="also img2dataset opening every image (the check its default mode makes), an equal-work baseline",
    )
    args = parser.parse_args()
    images = make_jpegs(40)
    print(f"{args.n} URLs per list, JPEGs of {sum(map(len, images)) / len(images) / 1000:.0f} KB on average, 50-150 ms per request")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    started = time.monotonic()
    import prx_data.ingest.driver  # noqa: F401
    import prx_data.ingest.http.download_session  # noqa: F401

    print(f"importing the ingest path (paid once per step process, before the first request): {time.monotonic() - started:.2f}s")
    tmp = Path(tempfile.mkdtemp(prefix="bench-url-"))
    if args.breakdown:
        try:
            cpu_breakdown(args.n, images, tmp, args.repeat)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return
    offset = 0
    steps = [(f"raw_samples w={w}", functools.partial(raw_samples, workers=w)) for w in args.workers]
    steps += [(f"raw_samples w=1 ph={ph}", functools.partial(raw_samples, per_host=ph)) for ph in args.per_host]
    tools: list[tuple[str, Callable[..., Measure]]] = [("img2dataset", img2dataset), *steps]
    if args.i2d_decode:
        tools.insert(1, ("img2dataset decode", functools.partial(img2dataset, decode=True)))
    if not args.skip_run:
        tools.append(("prx-data run", prx_run))
    held = contextlib.ExitStack()
    if max(args.workers) > 1:
        from prx_data.ingest import unit_tasks

        started = time.monotonic()
        held.enter_context(unit_tasks._ray(max(args.workers)))
        print(f"local Ray for workers > 1 (started once, as a run's Ray resource is): {time.monotonic() - started:.2f}s")
        with Served(1, images) as warm:
            started = time.monotonic()
            raw_samples(warm, warm.urls(64), tmp, max(args.workers))
            print(
                f"warm-up: 64 URLs with workers {max(args.workers)} (Ray workers import the ingest path): {time.monotonic() - started:.2f}s"
            )
    try:
        for hosts in args.hosts:
            served = Served(hosts, images)
            try:
                runs: dict[str, list[Measure]] = {name: [] for name, _ in tools}
                for turn in range(args.repeat):
                    # Interleaved, so a change in the machine's load falls on every tool alike,
                    # and each round starts with another tool: whatever runs right after
                    # img2dataset (its processes' exit, the server closing its 128 connections)
                    # measured up to a third slower.
                    for name, fn in tools[turn % len(tools) :] + tools[: turn % len(tools)]:
                        offset += args.n
                        runs[name].append(fn(served, served.urls(args.n, offset), tmp))
                for name, _ in tools:
                    m = _median(runs[name])
                    each = " ".join(f"{x.rate(args.n):.0f}" for x in runs[name])
                    print(
                        f"  {hosts:>2} host(s) | {name:<22} {m.wall:6.2f}s {args.n / m.wall:7.1f} img/s (each: {each}) "
                        f"download window {m.window:6.1f} img/s  first request after {m.first:.2f}s  CPU {m.cpu:.1f}s"
                    )
                i2d = _median(runs["img2dataset"])
                for name, _ in steps:
                    step = _median(runs[name])
                    print(
                        f"  {hosts:>2} host(s) | {name} / img2dataset: {step.rate(args.n) / i2d.rate(args.n):.2f}x whole command, "
                        f"{step.rate(args.n) / i2d.window:.2f}x its download window (goal >= 1.0)"
                    )
                    if "img2dataset decode" in runs:
                        checked = _median(runs["img2dataset decode"])
                        print(
                            f"  {hosts:>2} host(s) | {name} / img2dataset opening each image: {step.rate(args.n) / checked.window:.2f}x its download window"
                        )
                if "prx-data run" in runs:
                    print(
                        f"  {hosts:>2} host(s) | prx-data run / img2dataset: {_median(runs['prx-data run']).rate(args.n) / i2d.rate(args.n):.2f}x"
                    )
            finally:
                served.close()
    finally:
        held.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
