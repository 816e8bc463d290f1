"""One demo source's chain launched from the Dagster UI against ``prx-data run`` for that source.

    .venv/bin/python -m benchmarks.bench_ui_vs_cli --source archive --repeats 2

UI side, as a user clicking "Materialize" does: ``prx-data ui``'s own set-up (``dagster dev`` on
the data root with its warm local Ray) runs once, untimed, like a UI left open; each measured
run is submitted to the instance through the webserver's GraphQL API (what the UI sends), queued,
dequeued by the daemon and executed by the run launcher in a new process; the time is from
submit to the run's success. CLI side (the baseline, measured in the same session): a new
``prx-data run --root ROOT --source SOURCE`` process, timed from start to exit (imports, its own
Ray, the chain, then the corpus assets). Both start from an empty table for the source. Target:
UI / CLI median at most 1.5.
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
QUIET = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "DAGSTER_DISABLE_TELEMETRY": "1"}


def make_root(corpus: Path, root: Path, source: str) -> Path:
    shutil.copytree(corpus, root)
    for spec in (root / "sources").glob("*.yaml"):
        if spec.stem != source:
            spec.unlink()
    (root / "optout").mkdir(exist_ok=True)
    return root


def reset_tables(root: Path) -> None:
    for name in ("lance", "mds"):
        shutil.rmtree(root / name, ignore_errors=True)


def child_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRX_") and k != "DAGSTER_HOME"}
    env.update(QUIET, PRX_DATA_ROOT=str(root), DAGSTER_HOME=str(root / ".dagster"), PYTHONPATH=str(REPO))
    return env


def cli_run(root: Path, source: str) -> float:
    reset_tables(root)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root), "--source", source],
        env=child_env(root),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"prx-data run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def wait_idle(client, timeout_s: float = 600) -> None:
    """No run queued or in progress (automation may start the corpus assets after a chain)."""
    query = "{ runsOrError(filter: {statuses: [QUEUED, NOT_STARTED, STARTING, STARTED, CANCELING]}) { ... on Runs { results { runId } } } }"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not client._execute(query)["runsOrError"]["results"]:
            return
        time.sleep(1)
    raise SystemExit("runs still in progress after the timeout")


def wait_run(client, run_id: str, timeout_s: float = 1200) -> str:
    from dagster import DagsterRunStatus

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get_run_status(run_id)
        if status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
            return status.value
        time.sleep(0.25)
    return "TIMEOUT"


def ui_runs(root: Path, source: str, repeats: int, log) -> list[float]:
    from dagster_graphql import DagsterGraphQLClient

    from prx_data.app.local_ray import free_port, shared_local_ray, stop_process_group
    from prx_data.app.ui import start_ui, wait_for_port
    from prx_data.core.settings import get_settings

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(child_env(root))
    get_settings.cache_clear()
    home = root / ".dagster"
    home.mkdir(exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    times = []
    try:
        with shared_local_ray() as address, open(root / "dagster-dev.log", "wb") as out:
            port = free_port()
            started = time.perf_counter()
            process = start_ui(home, port, log_file=out)
            try:
                if not wait_for_port(process, port):
                    raise SystemExit(f"dagster dev did not start; see {root / 'dagster-dev.log'}")
                client = DagsterGraphQLClient("127.0.0.1", port_number=port)
                _wait_location(client)
                log(f"ui: dagster dev up in {time.perf_counter() - started:.1f}s (Ray {address}), untimed")
                _add_partition(root, source)
                for i in range(repeats):
                    wait_idle(client)
                    reset_tables(root)
                    start = time.perf_counter()
                    run_id = client.submit_job_execution("source_pipeline", tags={"dagster/partition": source})
                    status = wait_run(client, run_id)
                    elapsed = time.perf_counter() - start
                    if status != "SUCCESS":
                        raise SystemExit(f"UI run {run_id} ended {status}; see {root / 'dagster-dev.log'}")
                    times.append(elapsed)
                    log(f"ui  run {i + 1}: {elapsed:6.1f}s")
                wait_idle(client)
            finally:
                stop_process_group(process, timeout_s=30)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
    return times


def _wait_location(client, timeout_s: float = 300) -> None:
    query = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            entries = client._execute(query)["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return
        except Exception:  # noqa: BLE001 - the webserver is still starting
            pass
        time.sleep(1)
    raise SystemExit("the code location did not load")


def _add_partition(root: Path, source: str) -> None:
    import dagster as dg

    from prx_data.defs.orchestrate import ensure_partitions

    with dg.DagsterInstance.from_config(str(root / ".dagster")) as instance:
        ensure_partitions(instance, [source])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", default="archive", help="demo source (archive, links, shards, web, photos)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    from prx_data.demo.corpus import build_demo_corpus

    with tempfile.TemporaryDirectory(prefix="prx-bench-ui-") as tmp:
        corpus = Path(tmp) / "corpus"
        build_demo_corpus(corpus)
        cli_root = make_root(corpus, Path(tmp) / "cli", args.source)
        ui_root = make_root(corpus, Path(tmp) / "ui", args.source)
        cli = []
        for i in range(args.repeats):
            cli.append(cli_run(cli_root, args.source))
            print(f"cli run {i + 1}: {cli[-1]:6.1f}s", flush=True)
        ui = ui_runs(ui_root, args.source, args.repeats, lambda line: print(line, flush=True))
    cli_median, ui_median = statistics.median(cli), statistics.median(ui)
    ratio = ui_median / cli_median
    print(f"\nsource {args.source!r}, {args.repeats} run(s) each")
    print(f"prx-data run (baseline): median {cli_median:6.1f}s  {[round(t, 1) for t in cli]}")
    print(f"UI-launched chain:       median {ui_median:6.1f}s  {[round(t, 1) for t in ui]}")
    print(f"UI / CLI ratio: {ratio:.2f} (target <= 1.5) {'OK' if ratio <= 1.5 else 'OVER'}")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
