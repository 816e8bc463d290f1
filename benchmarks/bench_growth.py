"""Growth: the whole chain on N and on 4N images, per stage, with the fixed cost per run.

    .venv/bin/python -m benchmarks.bench_growth              # 5,000 and 20,000 images
    .venv/bin/python -m benchmarks.bench_growth --n 500      # 500 and 2,000
    .venv/bin/python -m benchmarks.bench_growth --n 500 --repeats 1
    .venv/bin/python -m benchmarks.bench_growth --n 500 --one-command 3   # per source run, one command

Builds 4N photo-like JPEGs on the fly (smooth blurred colour fields with shapes and grain, 0.3-0.5
MP, five aspect ratios, a .txt caption beside each, one in twenty a re-encoded near-duplicate of
its neighbour), an image-folder source of the first N and one of all 4N, and runs
``prx-data run`` on each as a subprocess on a fresh data root: ingest, phashes, captions (the
``source`` backend), labels (``minilm``), export and the corpus assets, with the default settings
a user gets. Each size runs ``--repeats`` times (default 3), interleaved, and every time is the
median of its runs.

Printed per stage (from the step start/end events the command's Dagster runs record in the
instance under ``<root>/.dagster``): seconds at N and at 4N and their ratio (goal: at most 4.4
for 4x the images) and each stage's own intercept; the time outside the steps (imports, Ray
start, code location, shutdown) and the whole command likewise; the peak RSS of the driver (the command's own
process) and of the largest Ray worker, sampled from /proc over the command's whole process tree
every 0.2 s (goal: ratio at most 1.2); and the fixed cost per run, the intercept of the line
through the two points, t(N) - (t(4N) - t(N)) / 3. Every goal gets a PASS or MISS; the load
average is printed beside the figures (on a shared machine wall times move with it). An uncounted
warm-up run on 20 images goes first (``--no-warmup`` skips it): otherwise the N run alone pays
cold file caches for the imports and the model, which flatters the ratios.

``--one-command K`` measures instead the fixed cost of a source run inside one command, as a
corpus with many sources (or a re-run after new sources land) meets it: one ``prx-data run`` on a
root with a 20-image source first (it pays the code location load and the Ray start), then K
sources of N and K of 4N images, alternating (hard links of the same images). Per source run
(the Dagster run's own start to end, from the instance, and the same plus the command's gap
since the previous run ended) and per stage it prints the medians at N and 4N and the intercept,
against a baseline measured in the same run: the same sources, each as a command of its own.

``--against OLD_TREE`` compares two code trees instead: one source of N images as a command of
its own, run alternately by OLD_TREE (a ``git worktree`` of the baseline commit) and this tree,
``--repeats`` times each; it prints each run's step seconds and the medians of the whole command
and of each step, with the ratio new/old.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RATIO_GOAL = 4.4  # time at 4N over time at N: linear work plus a little
RSS_GOAL = 1.2  # peak RSS at 4N over N: memory must not follow the source's size
SAMPLE_S = 0.2
ASPECTS = ((1, 1), (4, 3), (3, 4), (16, 9), (2, 3))
DUPLICATE_EVERY = 20  # one image in 20 is a re-encode of the one before it
PAGE = os.sysconf("SC_PAGE_SIZE")
_WORDS = (
    "a red boat on a calm lake",
    "a wooden table with fruit",
    "mountains under a pale sky",
    "a street at dusk",
    "a close-up of a flower",
    "a dog in tall grass",
    "a bowl of soup",
    "a bright window in a dark room",
    "a field of wheat",
    "waves breaking on rocks",
)


# --- the images ----------------------------------------------------------------------------------


def photo_like(index: int, seed: int) -> Image.Image:
    """Smooth like a photo (blurred colour field, soft-edged shapes, sensor grain), so decode,
    resize, JPEG sizes and perceptual hashes behave as on photos, not on noise or flat colour."""
    rng = np.random.default_rng([seed, index])
    aw, ah = ASPECTS[index % len(ASPECTS)]
    pixels = rng.uniform(0.3e6, 0.5e6)
    w = int(np.sqrt(pixels * aw / ah))
    h = int(pixels / w)
    # Drawn and blurred at a quarter of the size, then upscaled: the same smooth picture for a
    # sixteenth of the blur's cost (image building must not dominate the 20,000-image default).
    sw, sh = max(8, w // 4), max(8, h // 4)
    field_ = rng.integers(0, 256, size=(int(rng.integers(3, 7)), int(rng.integers(3, 7)), 3), dtype=np.uint8)
    image = Image.fromarray(field_, "RGB").resize((sw, sh), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 7))):
        x0, y0 = int(rng.integers(0, sw)), int(rng.integers(0, sh))
        x1, y1 = x0 + int(rng.integers(sw // 10, sw // 2)), y0 + int(rng.integers(sh // 10, sh // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.8, 2.0))))
    image = image.resize((w, h), Image.Resampling.BICUBIC)
    grain = rng.standard_normal(size=(h, w, 1), dtype=np.float32) * np.float32(rng.uniform(1.0, 3.0))
    return Image.fromarray(np.clip(np.asarray(image, dtype=np.float32) + grain + 0.5, 0, 255).astype(np.uint8), "RGB")


def build_images(folder: Path, n: int, seed: int) -> None:
    """``n`` JPEGs with .txt captions in ``folder``; image i (i % 20 == 19) is image i-1 re-encoded
    at another quality and 97 % of its size: a near-duplicate for the dedup stage to find."""
    folder.mkdir(parents=True, exist_ok=True)
    previous = None
    for i in range(n):
        rng = np.random.default_rng([seed, i, 7])
        if i % DUPLICATE_EVERY == DUPLICATE_EVERY - 1 and previous is not None:
            image = previous.resize((previous.width * 97 // 100, previous.height * 97 // 100), Image.Resampling.BILINEAR)
            caption = f"{_WORDS[(i - 1) % len(_WORDS)]}, again"
        else:
            image = photo_like(i, seed)
            caption = f"{_WORDS[i % len(_WORDS)]}, picture {i}"
        image.save(folder / f"img_{i:06d}.jpg", format="JPEG", quality=int(rng.integers(80, 95)))
        (folder / f"img_{i:06d}.txt").write_text(caption + "\n")
        previous = image


def link_first(source: Path, folder: Path, n: int) -> None:
    """The first ``n`` images of ``source`` (and their captions) in ``folder``, as hard links."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        for suffix in (".jpg", ".txt"):
            os.link(source / f"img_{i:06d}{suffix}", folder / f"img_{i:06d}{suffix}")


# --- memory of a process tree, from /proc ------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def _tree(root: int) -> list[int]:
    children, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _rss_and_name(pid: int) -> tuple[int, str] | None:
    try:
        rss_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError, ValueError):
        return None
    return rss_pages * PAGE, cmdline


def is_ray_worker(cmdline: str) -> bool:
    # Ray renames a busy worker's process to "ray::<task>"; an idle one runs default_worker.py.
    return cmdline.startswith("ray::") or "default_worker.py" in cmdline


@dataclass
class TreePeaks:
    """Peak RSS per process of a tree, sampled until stopped."""

    root: int
    peaks: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            for pid in _tree(self.root):
                got = _rss_and_name(pid)
                if got is None:
                    continue
                rss, name = got
                if rss > self.peaks.get(pid, 0):
                    self.peaks[pid] = rss
                if name:  # a worker renames itself once it runs a task: keep the last name seen
                    self.names[pid] = name
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()

    def driver(self) -> int:
        return self.peaks.get(self.root, 0)

    def largest_ray_worker(self) -> int:
        return max((rss for pid, rss in self.peaks.items() if is_ray_worker(self.names.get(pid, ""))), default=0)

    def ray_workers(self) -> int:
        return sum(1 for pid in self.peaks if is_ray_worker(self.names.get(pid, "")))


# --- one run ----------------------------------------------------------------------------------


@dataclass
class RunResult:
    images: int
    wall_s: float
    stages: dict[str, float]
    driver_rss: int
    worker_rss: int
    workers_seen: int


def combine(results: list[RunResult]) -> RunResult:
    """Median times over repeated runs of one size (a stage missing from a run is left out of
    its median); peak RSS is the highest any run reached."""
    stages: dict[str, list[float]] = {}
    for result in results:
        for stage, seconds in result.stages.items():
            stages.setdefault(stage, []).append(seconds)
    return RunResult(
        images=results[0].images,
        wall_s=statistics.median(r.wall_s for r in results),
        stages={stage: statistics.median(values) for stage, values in stages.items()},
        driver_rss=max(r.driver_rss for r in results),
        worker_rss=max(r.worker_rss for r in results),
        workers_seen=max(r.workers_seen for r in results),
    )


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "DAGSTER_HOME", "RAY_ADDRESS"))}
    env.update(
        PYTHONPATH=str(REPO),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        RAY_USAGE_STATS_ENABLED="0",
        DAGSTER_DISABLE_TELEMETRY="1",
        PRX_DATA_ROOT=str(root),
        PRX_CAPTIONER=json.dumps({"backend": "source"}),
        PRX_CLASSIFIER=json.dumps({"backend": "minilm"}),
        DAGSTER_HOME=str(root / ".dagster"),
        XDG_STATE_HOME=str(root / "state"),
    )
    return env


def stage_seconds(dagster_home: Path) -> dict[str, float]:
    """Seconds per step over every run in the instance (the per-source run and the corpus run):
    what each stage cost, from the step start and end events Dagster recorded."""
    # lazy: dagster is only needed once the runs are over
    import dagster as dg

    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        with dg.DagsterInstance.get() as instance:
            steps = [step for run in instance.get_runs() for step in instance.get_run_step_stats(run.run_id)]
            stages: dict[str, float] = {}
            for step in sorted(steps, key=lambda s: s.start_time or 0.0):  # pipeline order
                if step.start_time is None or step.end_time is None:
                    raise SystemExit(f"step {step.step_key} of run {step.run_id} has no end: the run did not finish")
                stages[step.step_key] = stages.get(step.step_key, 0.0) + step.end_time - step.start_time
            return stages
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved


def run_chain(folder: Path, root: Path, images: int, log: Path) -> RunResult:
    (root / "sources").mkdir(parents=True)
    spec = {"name": "growth", "shape": "image_folder", "location": str(folder), "license": "CC0-1.0"}
    (root / "sources" / "growth.yaml").write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root)]
    with log.open("w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=_env(root), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        peaks = TreePeaks(proc.pid)
        sampler = threading.Thread(target=peaks.run, daemon=True)
        sampler.start()
        code = proc.wait()
        wall = time.perf_counter() - started
        peaks.stop()
        sampler.join()
    if code != 0:
        raise SystemExit(f"prx-data run on {images} images failed ({code}); its output:\n{log.read_text()[-4000:]}")
    return RunResult(images, wall, stage_seconds(root / ".dagster"), peaks.driver(), peaks.largest_ray_worker(), peaks.ray_workers())


def run_sources_in_one_command(work: Path, n: int, k: int) -> list[str]:
    """One command over a warm-up source and K sources each of N and 4N images: the per-run
    figures (Dagster run start to end) of the 2K measured source runs."""
    # lazy: dagster is only needed once the runs are over
    import dagster as dg

    root = work / "root_one_command"
    (root / "sources").mkdir(parents=True)
    plan = [("s00_warm", DUPLICATE_EVERY)] + [(f"s{2 * i + j + 1:02d}_{size}", size) for i in range(k) for j, size in enumerate((n, 4 * n))]
    for name, images in plan:
        link_first(work / "all", work / name, images)
        spec = {"name": name, "shape": "image_folder", "location": str(work / name), "license": "CC0-1.0"}
        (root / "sources" / f"{name}.yaml").write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "prx_data.app.cli", "run", "--root", str(root)]
    started = time.perf_counter()
    with (work / "one_command.log").open("w") as out:
        code = subprocess.run(cmd, env=_env(root), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"prx-data run failed ({code}); its output:\n{(work / 'one_command.log').read_text()[-4000:]}")
    os.environ["DAGSTER_HOME"] = str(root / ".dagster")
    per_size: dict[int, list[dict[str, float]]] = {n: [], 4 * n: []}
    with dg.DagsterInstance.get() as instance:
        records = sorted(instance.get_run_records(), key=lambda r: r.start_time or 0.0)
        for before, record in zip([None, *records], records):
            source = record.dagster_run.tags.get("dagster/partition")
            size = dict(plan).get(source or "")
            if size is None or size not in per_size or before is None:
                continue  # the warm-up source and the corpus run
            assert record.start_time and record.end_time and before.end_time
            figures = {
                "source run, with the gap before it": record.end_time - before.end_time,
                "source run (Dagster run start to end)": record.end_time - record.start_time,
            }
            for step in instance.get_run_step_stats(record.dagster_run.run_id):
                figures[step.step_key] = (step.end_time or 0.0) - (step.start_time or 0.0)
            per_size[size].append(figures)
    # Baseline, same run: each source as a command of its own (as separate sensor-started runs
    # meet it), so each pays the start-up, the code location and its own Ray.
    alone: dict[int, list[float]] = {n: [], 4 * n: []}
    base = work / "root_one_each"
    (base / "sources").mkdir(parents=True)
    for name, _ in plan:
        shutil.copy(root / "sources" / f"{name}.yaml", base / "sources" / f"{name}.yaml")
    for name, images in plan:
        t = time.perf_counter()
        with (work / f"alone_{name}.log").open("w") as out:
            code = subprocess.run(
                [*cmd[:-1], str(base), "--source", name],
                env=_env(base),
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            ).returncode
        if code != 0:
            raise SystemExit(
                f"prx-data run --source {name} failed ({code}); its output:\n{(work / f'alone_{name}.log').read_text()[-4000:]}"
            )
        if images in alone:
            alone[images].append(time.perf_counter() - t)
    a, b = statistics.median(alone[n]), statistics.median(alone[4 * n])
    lines = [
        f"one command, {len(plan)} sources: {wall:.2f} s wall (warm-up source of {DUPLICATE_EVERY} images first, then "
        f"{k} x {n} and {k} x {4 * n} alternating)",
        f"{'per source run (median of ' + str(k) + ')':<38} {f't@{n} s':>10} {f't@{4 * n} s':>10} {'ratio':>6}  {'intercept s':>11}",
        f"{'baseline: a command per source (wall)':<38} {a:>10.2f} {b:>10.2f} {b / a:>6.2f}  {intercept(a, b, 4):>11.2f}",
    ]
    for key in per_size[n][0]:
        a = statistics.median(f[key] for f in per_size[n] if key in f)
        b = statistics.median(f[key] for f in per_size[4 * n] if key in f)
        lines.append(f"{key:<38} {a:>10.2f} {b:>10.2f} {b / a if a else float('inf'):>6.2f}  {intercept(a, b, 4):>11.2f}")
    return lines


# --- the table --------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def intercept(t_small: float, t_large: float, scale: float) -> float:
    """The fixed cost of the line through (N, t_small) and (scale*N, t_large): t(N) - (t(4N) - t(N)) / 3 for 4x."""
    return t_small - (t_large - t_small) / (scale - 1)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _time_row(label: str, a: float, b: float, scale: float) -> str:
    ratio = b / a if a > 0 else float("inf")
    return (
        f"{label:<38} {a:>10.2f} {b:>10.2f} {ratio:>6.2f}  <= {RATIO_GOAL:<4}  {verdict(ratio <= RATIO_GOAL):<7}  "
        f"{intercept(a, b, scale):>8.2f}"
    )


def report(small: RunResult, large: RunResult) -> list[str]:
    scale = large.images / small.images
    lines = [
        f"{'stage (Dagster step)':<38} {f't@{small.images} s':>10} {f't@{large.images} s':>10} {'ratio':>6}  {'goal':<7}  {'verdict':<7}  intercept s"
    ]
    for stage in [*small.stages, *(s for s in large.stages if s not in small.stages)]:
        a, b = small.stages.get(stage), large.stages.get(stage)
        if a is None or b is None:  # a step that ran in one run only (nothing to compare)
            lines.append(f"{stage:<38} {_num(a):>10} {_num(b):>10}  (ran in one run only)")
            continue
        lines.append(_time_row(stage, a, b, scale))
    outside_a, outside_b = small.wall_s - sum(small.stages.values()), large.wall_s - sum(large.stages.values())
    lines.append(_time_row("outside the steps (start, Ray, exit)", outside_a, outside_b, scale))
    lines.append(_time_row("whole command", small.wall_s, large.wall_s, scale))
    for label, a, b in (
        ("peak RSS driver (MB)", small.driver_rss, large.driver_rss),
        ("peak RSS largest Ray worker (MB)", small.worker_rss, large.worker_rss),
    ):
        if a <= 0 or b <= 0:
            lines.append(f"{label:<38} {a / 1e6:>10.1f} {b / 1e6:>10.1f}  no sample   MISS")
            continue
        lines.append(f"{label:<38} {a / 1e6:>10.1f} {b / 1e6:>10.1f} {b / a:>6.2f}  <= {RSS_GOAL:<4}  {verdict(b / a <= RSS_GOAL)}")
    per_image = (large.wall_s - small.wall_s) / (large.images - small.images)
    marginal = (
        f"{per_image * 1000:.2f} ms/image ({1 / per_image:.1f} images/s)"
        if per_image > 0
        else "n/a: the larger run was not slower (noise exceeds the work at this size)"
    )
    lines.append(
        f"fixed cost per run (intercept, whole command): {intercept(small.wall_s, large.wall_s, scale):.2f} s   marginal: {marginal}"
    )
    lines.append(f"Ray worker processes seen: {small.workers_seen} at {small.images}, {large.workers_seen} at {large.images}")
    # Every goal row starts with its 38-character label and carries its verdict as a word.
    misses = [line[:38].strip() for line in lines[1:] if "MISS" in line.split()]
    passes = sum(1 for line in lines[1:] if "PASS" in line.split())
    lines.append(f"goals: {passes} PASS, {len(misses)} MISS" + (f" ({', '.join(misses)})" if misses else ""))
    return lines


def run_against(work: Path, n: int, old_tree: Path, repeats: int) -> list[str]:
    """One source of ``n`` images as a command of its own, alternately by ``old_tree`` and this tree."""
    global REPO
    trees = {"old": Path(old_tree).resolve(), "new": REPO}
    runs: dict[str, list[RunResult]] = {"old": [], "new": []}
    lines = []
    try:
        for repeat in range(repeats):
            for label, tree in trees.items():
                REPO = tree
                result = run_chain(work / "small", work / f"root_{label}_{repeat}", n, work / f"{label}_{repeat}.log")
                runs[label].append(result)
                steps = ", ".join(f"{k} {v:.2f}" for k, v in result.stages.items() if v >= 0.3)
                lines.append(f"{label} run {repeat + 1}: {result.wall_s:.2f} s ({steps})")
                print(lines[-1], flush=True)
    finally:
        REPO = trees["new"]
    old, new = combine(runs["old"]), combine(runs["new"])
    lines.append(f"\nmedians of {repeats}, {n} images   {'old s':>8} {'new s':>8} {'new/old':>8}")
    lines.append(f"{'whole command':<30} {old.wall_s:>8.2f} {new.wall_s:>8.2f} {new.wall_s / old.wall_s:>8.2f}")
    for key in old.stages:
        a, b = old.stages[key], new.stages.get(key, 0.0)
        if max(a, b) >= 0.3:
            lines.append(f"{key:<30} {a:>8.2f} {b:>8.2f} {b / a if a else float('inf'):>8.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000, help="the small size; the large one is 4x (default 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the uncounted first run on a few images (without it the N run pays cold file caches)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per size, interleaved; times are medians (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the images, roots and logs (path printed)")
    parser.add_argument(
        "--one-command",
        type=int,
        default=0,
        metavar="K",
        help="instead: K sources of N and K of 4N in one command; the fixed cost per source run",
    )
    parser.add_argument(
        "--against", metavar="OLD_TREE", help="instead: N images as a command of its own, alternately by OLD_TREE and this tree"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.n < DUPLICATE_EVERY:
        parser.error(f"--n must be at least {DUPLICATE_EVERY} (one planted duplicate per {DUPLICATE_EVERY} images)")

    work = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    try:
        print(f"load average: {tuple(round(x, 2) for x in os.getloadavg())}  cores: {os.cpu_count()}  work: {work}")
        started = time.perf_counter()
        built = args.n if args.against else 4 * args.n
        build_images(work / "all", built, args.seed)
        link_first(work / "all", work / "small", args.n)
        size = sum(p.stat().st_size for p in (work / "all").glob("*.jpg"))
        print(
            f"built {built} JPEGs ({size / 1e6:.1f} MB, {built // DUPLICATE_EVERY} planted near-duplicates) "
            f"in {time.perf_counter() - started:.1f} s"
        )
        if args.against:
            print("\n".join(run_against(work, args.n, args.against, args.repeats)[args.repeats * 2 :]))
            return 0
        if args.one_command:
            print("\n".join(run_sources_in_one_command(work, args.n, args.one_command)))
            return 0
        if not args.no_warmup:
            link_first(work / "all", work / "warm", DUPLICATE_EVERY)
            warm = run_chain(work / "warm", work / "root_warm", DUPLICATE_EVERY, work / "warm.log")
            print(f"warm-up run on {DUPLICATE_EVERY} images (not counted): {warm.wall_s:.2f} s")
        runs: dict[str, list[RunResult]] = {"small": [], "all": []}
        for repeat in range(args.repeats):
            # Interleaved (N, 4N, N, 4N...): a change in the machine's load hits both sizes alike.
            for name, images in (("small", args.n), ("all", 4 * args.n)):
                result = run_chain(work / name, work / f"root_{name}_{repeat}", images, work / f"{name}_{repeat}.log")
                runs[name].append(result)
                print(
                    f"run {repeat + 1}/{args.repeats} on {images}: {result.wall_s:.2f} s  "
                    f"load average: {tuple(round(x, 2) for x in os.getloadavg())}"
                )
        print(f"\n{'medians' if args.repeats > 1 else 'one run'} of {args.repeats} per size; peak RSS: the highest of the runs")
        print("\n".join(report(combine(runs["small"]), combine(runs["all"]))))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
