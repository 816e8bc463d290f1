"""The fixed cost around the work: imports, the local Ray's start and stop, plain commands, and a
``prx-data run`` that finds nothing to do, each against a baseline measured in the same run.

    .venv/bin/python -m benchmarks.bench_fixed_cost --repeats 3
    .venv/bin/python -m benchmarks.bench_fixed_cost --repeats 3 --skip-demo --skip-old-stop

Every figure is the median wall time of ``--repeats`` fresh processes. Baselines:
- code location: ``import prx_data.definitions`` now, against the same plus ``import streaming``
  (what the code location paid before MDSWriter moved into the function that writes shards);
  ``streaming.base.format.mds.writer`` is timed too, to show a "light" submodule still runs the
  package's ``__init__`` (torch, transformers);
- Ray stop: ``LocalRayHead.stop`` now, against the old stop (SIGTERM to the head's group, then
  wait up to 10 s before SIGKILL);
- no-change run: ``prx-data run`` on the built demo root, against the first run of the same root;
- a run with a small change (two new images in one source), against the same with every stage
  on Ray (``PRX_LOCAL_MAX_ROWS=0``).
The machine's load average is printed beside the figures: on a shared 2-core machine every wall
time moves with it, the ratios much less.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEAVY = ("torch", "transformers", "streaming", "vllm", "sentence_transformers")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "RAY_AUTH", "DAGSTER_HOME"))}
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        RAY_USAGE_STATS_ENABLED="0",
        DAGSTER_DISABLE_TELEMETRY="1",
        **extra,
    )
    return env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


CPU: dict[str, float] = {}  # median CPU seconds of the last _wall, by command line


def _wall(cmd: list[str], env: dict[str, str], repeats: int) -> tuple[float, str]:
    """Median wall seconds of ``cmd``; its median CPU seconds (the process and the children it
    waited for) go to CPU: on a loaded machine wall time measures the neighbours too."""
    times, cpus, out = [], [], ""
    for _ in range(repeats):
        t, c = time.perf_counter(), _children_cpu()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - t)
        cpus.append(_children_cpu() - c)
        out = proc.stdout + proc.stderr
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    CPU[" ".join(cmd)] = statistics.median(cpus)
    return statistics.median(times), out


def _cpu(cmd: list[str]) -> str:
    return f"cpu {CPU[' '.join(cmd)]:5.2f} s"


def _import_time(statement: str, env: dict[str, str], repeats: int) -> tuple[float, list[str]]:
    code = (
        "import sys, time; t = time.perf_counter(); "
        + statement
        + f"; print(time.perf_counter() - t); print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    times, heavy = [], []
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        lines = proc.stdout.strip().splitlines()
        times.append(float(lines[-2]))
        heavy = [m for m in lines[-1].removeprefix("HEAVY=").split(",") if m]
    return statistics.median(times), heavy


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "prx_data.app.cli", *args]


def bench_imports(env, repeats: int) -> None:
    print("\n== imports (fresh interpreter, median s) ==")
    now, heavy = _import_time("import prx_data.definitions", env, repeats)
    old, _ = _import_time("import prx_data.definitions, streaming", env, repeats)
    print(f"code location (prx_data.definitions): {now:6.2f} s  heavy loaded: {heavy or 'none'}")
    print(f"  baseline, + import streaming (before): {old:6.2f} s  ratio now/before = {now / old:.2f}")
    light, heavy = _import_time("import streaming.base.format.mds.writer", env, repeats)
    print(f"streaming.base.format.mds.writer alone: {light:6.2f} s  heavy loaded: {heavy}  (the package __init__ runs)")
    for label, stmt in [
        ("cli (argument parsing)", "import prx_data.app.cli"),
        ("sources", "import prx_data.ingest.registry, prx_data.core.settings"),
        ("lineage", "import prx_data.curation.lineage, prx_data.ingest.registry"),
        ("optout add", "import prx_data.curation.optout.requests"),
        ("optout apply", "import prx_data.curation.refresh, prx_data.curation.fold"),
        ("optout report", "import prx_data.curation.optout.receipt"),
        ("buckets", "import prx_data.imaging.buckets"),
    ]:
        t, heavy = _import_time(stmt, env, repeats)
        print(f"  {label:<24} {t:6.2f} s  heavy loaded: {heavy or 'none'}")


def bench_ray(env, repeats: int, old_stop: bool) -> None:
    from prx_data.app.local_ray import start_head, stop_process_group

    print("\n== local Ray head (median s) ==")
    starts: list[float] = []
    stops: list[float] = []
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        for _ in range(repeats):
            head = start_head()
            head.wait_ready()
            assert head.started_s is not None
            starts.append(head.started_s)
            t = time.perf_counter()
            head.stop()
            stops.append(time.perf_counter() - t)
        print(f"start to ready: {statistics.median(starts):6.2f} s")
        print(f"stop (now):     {statistics.median(stops):6.2f} s")
        if old_stop:
            head = start_head()
            head.wait_ready()
            t = time.perf_counter()
            stop_process_group(head.process, 10.0)  # the old LocalRayHead.stop
            before = time.perf_counter() - t
            head.stop()
            print(f"stop (before: SIGTERM, wait up to 10 s): {before:6.2f} s  ratio now/before = {statistics.median(stops) / before:.2f}")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_commands(env, root: Path, repeats: int) -> None:
    import lance

    print(f"\n== plain commands on {root} (median wall s, process start included) ==")
    key = lance.dataset(str(root / "lance" / "sources" / "photos.lance")).to_table(columns=["source_key"], limit=1).column(0)[0].as_py()
    for label, args in [
        ("sources", ["sources", "--root", str(root)]),
        ("buckets", ["buckets"]),
        ("lineage --key", ["lineage", "--root", str(root), "--key", f"photos:{key}"]),
        ("optout report", ["optout", "report", "--root", str(root), "--id", "bench-none"]),
    ]:
        t, _out = _wall(_cli(*args), env, repeats)
        print(f"  prx-data {label:<16} {t:6.2f} s  {_cpu(_cli(*args))}")


def bench_demo(env, root: Path, repeats: int) -> None:
    print("\n== demo: first run and no-change runs (wall s) ==")
    from prx_data.demo.corpus import build_demo_corpus

    t = time.perf_counter()
    build_demo_corpus(root)
    print(f"  build the demo corpus (bootstrap): {time.perf_counter() - t:6.2f} s")
    run = _cli("run", "--root", str(root))
    first, out = _wall(run, env, 1)
    assert "FAILED" not in out, out[-3000:]
    first_cpu = CPU[" ".join(run)]
    print(f"  first run (5 sources):            {first:6.2f} s  {_cpu(run)} (the command; its Ray head is not waited for)")
    bench_no_change(env, root, repeats, first, first_cpu)


def bench_no_change(env, root: Path, repeats: int, first: float | None = None, first_cpu: float | None = None) -> None:
    run = _cli("run", "--root", str(root))
    again, out = _wall(run, env, repeats)
    skipped = out.count("inputs unchanged")
    ratio = f"  ratio to first: wall {again / first:.3f}, cpu {CPU[' '.join(run)] / first_cpu:.3f}" if first and first_cpu else ""
    print(f"  no-change run (median of {repeats}):     {again:6.2f} s  {_cpu(run)}  ({skipped} skip lines){ratio}")
    three = [*run, "--source", "photos", "--source", "shards", "--source", "web"]
    again3, _ = _wall(three, env, repeats)
    ratio = f"  ratio to first (5 sources): {again3 / first:.3f}" if first else ""
    print(f"  no-change run, 3 sources:         {again3:6.2f} s  {_cpu(three)}{ratio}")


def bench_small_change(env, root: Path, repeats: int) -> None:
    """A run that has a little to do, the commonest run a sensor starts: two new images in one
    source. Each repeat adds two more. Baseline: the same with PRX_LOCAL_MAX_ROWS=0, every stage
    on Ray as before executor "auto" (the head then starts when the first stage needs it)."""
    from PIL import Image

    folder = root / "photos" / "bench_new"
    folder.mkdir(exist_ok=True)
    counter = iter(range(10**6))

    def add_two() -> None:
        for _ in range(2):
            i = next(counter)
            colour = (37 * i % 256, 91 * i % 256, 53 * i % 256)
            Image.new("RGB", (640, 480), colour).save(folder / f"n{i}.jpg", quality=90)
            (folder / f"n{i}.txt").write_text(f"a plain field of colour number {i}, added by the benchmark")

    run = _cli("run", "--root", str(root))
    print("\n== a run with a small change (2 new images in one source; median wall s) ==")
    figures = {}
    for label, extra in (("auto (small work in the run's process)", {}), ("baseline: every stage on Ray", {"PRX_LOCAL_MAX_ROWS": "0"})):
        times, cpus = [], []
        for _ in range(repeats):
            add_two()
            t, out = _wall(run, {**env, **extra}, 1)
            assert "FAILED" not in out, out[-3000:]
            times.append(t)
            cpus.append(CPU[" ".join(run)])
        figures[label] = statistics.median(times)
        print(f"  {label:<40} {figures[label]:6.2f} s  cpu {statistics.median(cpus):5.2f} s")
    auto, ray = figures.values()
    print(f"  ratio auto/baseline = {auto / ray:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true", help="no demo runs (minutes)")
    parser.add_argument("--skip-old-stop", action="store_true", help="do not wait for the old 10 s stop")
    parser.add_argument("--root", help="an existing, built demo root for the command and no-change timings (default: a fresh one)")
    parser.add_argument("--skip-imports", action="store_true")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-small-change", action="store_true", help="no runs with 2 new images (adds images to the root)")
    args = parser.parse_args(argv)

    print(f"load average: {os.getloadavg()}  cores: {os.cpu_count()}")
    work = Path(tempfile.mkdtemp(prefix="bench-fixed-"))
    env = _env(XDG_STATE_HOME=str(work / "state"))
    try:
        if not args.skip_imports:
            bench_imports(env, args.repeats)
        if not args.skip_ray:
            bench_ray(env, args.repeats, not args.skip_old_stop)
        root = Path(args.root) if args.root else work / "demo"
        if not args.skip_demo and not args.root:
            bench_demo(env, root, args.repeats)
        if args.root:
            print("\n== no-change runs of the given root ==")
            bench_no_change(env, root, args.repeats)
        if (root / "lance").exists() and not args.skip_small_change:
            bench_small_change(env, root, args.repeats)
        if (root / "lance").exists():
            bench_commands(env, root, args.repeats)
        print(f"\nload average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
