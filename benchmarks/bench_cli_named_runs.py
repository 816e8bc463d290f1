"""What recording `prx-data run`'s runs as runs of the code location's named jobs costs: the wall
time of a small ``prx-data run --force`` (one two-image source, its chain and the corpus run) from
this tree, against the same command from a baseline tree (e.g. /work/main, which executes the
jobs with ``execute_in_process``), alternated in the same session, medians.

    .venv/bin/python -m benchmarks.bench_cli_named_runs --baseline /work/main --repeats 3

Also timed in-process: deriving the run's origin from workspace.yaml (no code-location load).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _env(tree: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "RAY_AUTH", "DAGSTER_HOME"))}
    env.update(
        PYTHONPATH=str(tree),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        RAY_USAGE_STATS_ENABLED="0",
        DAGSTER_DISABLE_TELEMETRY="1",
        XDG_STATE_HOME=str(tmp / "state"),
    )
    return env


def _timed_run(tree: Path, root: Path, tmp: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root), "--force"],
        cwd=tmp,
        env=_env(tree, tmp),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"prx-data run failed from {tree}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall


def _origin_cost(repeats: int) -> float:
    from prx_data.app.cli import _workspace_file
    from prx_data.defs.build import build_defs
    from prx_data.defs.named_runs import repository_origin

    defs = build_defs()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        repository_origin(_workspace_file(), defs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout whose prx_data executes jobs in process")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from prx_data_tests.app.helpers import tiny_root

    with tempfile.TemporaryDirectory(prefix="bench_named_runs_") as tmp_name:
        tmp = Path(tmp_name)
        walls: dict[str, list[float]] = {"baseline": [], "named": []}
        trees = {"baseline": args.baseline.resolve(), "named": REPO}
        for name in walls:  # one root per tree: each keeps its own Dagster home and records
            tiny_root(tmp / name)
        for i in range(args.repeats):
            for name in ("baseline", "named") if i % 2 == 0 else ("named", "baseline"):
                walls[name].append(_timed_run(trees[name], tmp / name, tmp))
                print(f"  {name:>8} run {i + 1}: {walls[name][-1]:.1f} s", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
    base, named = statistics.median(walls["baseline"]), statistics.median(walls["named"])
    print(
        f"prx-data run --force, tiny root (median of {args.repeats}): baseline {base:.1f} s, named jobs {named:.1f} s, "
        f"ratio {named / base:.2f}  (load average {os.getloadavg()[0]:.1f})"
    )
    print(f"origin from workspace.yaml, in process: {_origin_cost(5) * 1000:.1f} ms (median of 5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
