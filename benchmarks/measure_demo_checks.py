"""The demo's asset-check outcomes, from one or more trees (e.g. /work/main against this one):
``prx-data demo --fresh`` into a temporary root per tree, then every check evaluation its runs
recorded, counted as passed / failed (ERROR) / warn (failed at WARN severity), and the latest
outcome per check as the UI's asset pages show it.

    .venv/bin/python -m benchmarks.measure_demo_checks /work/main .
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COUNT = r"""
import json, sys
from collections import Counter
import dagster as dg
evaluations, latest = Counter(), {}
with dg.DagsterInstance.get() as instance:
    records = instance.get_event_records(dg.EventRecordsFilter(dg.DagsterEventType.ASSET_CHECK_EVALUATION), ascending=True)
    for record in records:
        data = record.event_log_entry.dagster_event.event_specific_data
        outcome = "passed" if data.passed else ("warn" if data.severity == dg.AssetCheckSeverity.WARN else "failed")
        evaluations[outcome] += 1
        latest[f"{data.asset_key.to_user_string()}:{data.check_name}"] = outcome
    failing = sorted(k for k, v in latest.items() if v != "passed")
print(json.dumps({"evaluations": evaluations, "latest_per_check": Counter(latest.values()), "not_passing": failing}))
"""


def measure(tree: Path, tmp: Path) -> dict:
    root = tmp / "demo"
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
    start = time.perf_counter()
    demo = subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", "demo", "--root", str(root), "--fresh"], cwd=tmp, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    env["DAGSTER_HOME"] = str(root / ".dagster")
    counted = subprocess.run([sys.executable, "-c", COUNT], cwd=tmp, env=env, capture_output=True, text=True, check=True)
    result = json.loads(counted.stdout.strip().splitlines()[-1])
    result.update(demo_exit=demo.returncode, demo_wall_s=round(wall, 1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="demo_checks_") as tmp_name:
        for i, tree in enumerate(args.trees):
            tmp = Path(tmp_name) / str(i)
            tmp.mkdir()
            print(f"{tree.resolve()}: {json.dumps(measure(tree.resolve(), tmp), sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
