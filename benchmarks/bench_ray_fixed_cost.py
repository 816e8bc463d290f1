"""The fixed Ray cost of a run: a Ray started per run (before) against one shared local head that
every run connects to (now: ``prx-data run``, ``demo`` and ``ui``).

    .venv/bin/python -m benchmarks.bench_ray_fixed_cost --runs 3

Each "run" is what a Dagster run's Ray resource does around the work: before, ``ray.init()``
starts a local Ray in the run's process, one tiny task runs (workers start cold), and
``ray.shutdown()`` stops it; now, ``ray.init(address=...)`` connects to the head started once
per command, the same task runs on its warm workers, and the driver disconnects. Each run is a
fresh process, as each run of the UI is. Prints the per-run medians and the one-off head start.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = """
import os, sys, time
t0 = time.perf_counter()
import ray
address = sys.argv[1] if len(sys.argv) > 1 else None
kwargs = dict(include_dashboard=False, configure_logging=False, log_to_driver=False)
if address is None:
    kwargs["_node_ip_address"] = "127.0.0.1"
ray.init(address=address, **kwargs)
assert ray.get(ray.remote(lambda: 1).remote()) == 1
ray.shutdown()
print(time.perf_counter() - t0)
"""


def one_run(address: str | None, auth: dict[str, str]) -> float:
    # Token auth and the loopback switch, as the product runs every Ray it starts (core.ray_auth).
    env = {**os.environ, **auth}
    env.pop("RAY_AUTH_TOKEN", None)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *([address] if address else [])], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    from prx_data.app.local_ray import start_head
    from prx_data.core.ray_auth import head_env, remove_token, write_token

    token_path = write_token()
    try:
        before = [one_run(None, head_env(token_path)) for _ in range(args.runs)]
    finally:
        remove_token(token_path)
    print(f"Ray per run (before):   {[round(t, 1) for t in before]}", flush=True)
    started = time.perf_counter()
    head = start_head()
    head_s = time.perf_counter() - started
    try:
        now = [one_run(head.address, head.env) for _ in range(args.runs)]
    finally:
        head.stop()
    print(f"shared head (now):      {[round(t, 1) for t in now]}; head started once in {head_s:.1f}s")
    b, n = statistics.median(before), statistics.median(now)
    print(f"fixed Ray cost per run: median {b:.1f}s before, {n:.1f}s now ({b / n:.1f}x less)")
    print(f"{args.runs} runs in one command: {sum(before):.1f}s before, {head_s + sum(now):.1f}s now (head start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
