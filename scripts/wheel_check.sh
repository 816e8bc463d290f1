#!/usr/bin/env bash
# The package works as a wheel, away from the checkout: build it, install it into a fresh venv,
# then from an unrelated folder run `prx-data demo` and start `prx-data ui` until it serves its
# code location over HTTP on a loopback port.
#
# Fast and honest: the fresh venv gets only the wheel (`--no-deps`); the heavy third-party
# packages are borrowed from the project's venv through a .pth path entry. Python does not run
# the .pth files of a directory added that way, so the checkout's editable install of prx_data
# stays invisible: every prx_data module comes from the wheel (checked below), and the wheel's
# declared requirements are checked against what the venv can import.
#
# --base borrows them instead from the pipeline's base install (scripts/base_env.sh: `pip install
# prx-data` without extras, cached), and checks that torch, streaming and transformers cannot be
# imported there and that prx_data.training says which extra it needs. --explore starts
# `prx-data explore` on the demo's data and reads its pages.
#
# Usage: scripts/wheel_check.sh [--base] [--no-demo] [--demo-source NAME] [--no-ui] [--explore]
#        (PRX_PYTHON: the venv that builds the wheel and, without --base, lends the deps)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PRX_PYTHON:-$REPO/.venv/bin/python}
DEMO=1 UI=1 BASE_INSTALL=0 EXPLORE=0 DEMO_SOURCES=()
while [ $# -gt 0 ]; do
  case $1 in
    --no-demo) DEMO=0 ;;
    --no-ui) UI=0 ;;
    --base) BASE_INSTALL=1 ;;
    --explore) EXPLORE=1 ;;
    --demo-source) DEMO_SOURCES+=(--source "$2"); shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
WORK=$(mktemp -d /tmp/prx-wheel-XXXXXX)
UI_PID= EXPLORE_PID=
cleanup() {
  for pid in "$UI_PID" "$EXPLORE_PID"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
  done
  rm -rf "$WORK" 2>/dev/null || { sleep 2; rm -rf "$WORK"; }
}
trap cleanup EXIT
step() { printf '[wheel_check %5ss] %s\n' "$SECONDS" "$*"; }

step "building the wheel"
# No build isolation: setuptools comes from the venv (no index needed); a copy of the tree keeps
# build/ and *.egg-info out of the checkout.
mkdir -p "$WORK/src"
git -C "$REPO" ls-files -z --cached --others --exclude-standard | (cd "$REPO" && xargs -0 cp --parents -t "$WORK/src" 2>/dev/null || true)
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/src" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
WHEEL=$(ls "$WORK"/dist/prx_data-*.whl)
step "built $(basename "$WHEEL")"

"$PY" - "$WHEEL" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
needed = ["prx_data/app/resources/dagster.yaml", "prx_data/app/resources/workspace.yaml",
          "prx_data/explorer/templates/base.html", "prx_data/explorer/static/style.css",
          "prx_data/models/inference/gpu_worker/requirements.txt", "prx_data/definitions.py"]
missing = [n for n in needed if n not in names]
assert not missing, f"the wheel lacks {missing}"
assert not any(n.startswith(("prx_data_tests/", "benchmarks/")) for n in names), "tests or benchmarks shipped"
PY

step "installing it into a fresh venv"
BASE=$("$PY" -c 'import sys; print(sys._base_executable)')
"$BASE" -m venv --without-pip "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$PY" -m pip --python "$VPY" install -q --no-deps "$WHEEL"
DEPS_PY=$PY
if [ "$BASE_INSTALL" = 1 ]; then
  step "the base install's packages (scripts/base_env.sh)"
  DEPS_PY=$(bash "$REPO/scripts/base_env.sh")
  step "borrowing $(du -sh "$(dirname "$(dirname "$DEPS_PY")")" | cut -f1) of packages from $(dirname "$(dirname "$DEPS_PY")")"
fi
DEPS=$("$DEPS_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
VSITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$DEPS" > "$VSITE/_prx_borrowed_deps.pth"

mkdir -p "$WORK/elsewhere"
cd "$WORK/elsewhere"
# A clean environment: no PYTHONPATH, no PRX_* or DAGSTER_HOME of the caller, this venv first.
CLEAN_ENV=(env -i HOME="$WORK/home" PATH="$WORK/venv/bin:/usr/bin:/bin" LANG=C.UTF-8
  XDG_STATE_HOME="$WORK/state" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
  DAGSTER_DISABLE_TELEMETRY=1)
run() { "${CLEAN_ENV[@]}" "$@"; }
mkdir -p "$WORK/home"

PYTHONWARNINGS=ignore run "$VPY" - "$VSITE" <<'PY'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
import prx_data, prx_data.app.cli, prx_data.definitions  # the code location imports
site = sys.argv[1]
loaded = [m.__file__ for n, m in list(sys.modules.items()) if n.split(".")[0] == "prx_data" and getattr(m, "__file__", None)]
stray = [f for f in loaded if not f.startswith(site)]
assert not stray, f"prx_data modules not from the wheel: {stray[:3]}"
dist = md.distribution("prx-data")
unmet = []
for text in dist.requires or []:
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue  # an extra (dev, demo)
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        unmet.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(version, prereleases=True):
        unmet.append(f"{req} (installed {version})")
assert not unmet, f"declared requirements not met: {unmet}"
print(f"{len(loaded)} prx_data modules from the wheel; {len(dist.requires or [])} declared requirements met")
PY
if [ "$BASE_INSTALL" = 1 ]; then
  PYTHONWARNINGS=ignore run "$VPY" - <<'PY'
import importlib.util
present = [m for m in ("torch", "streaming", "transformers", "sentence_transformers", "torchvision", "triton") if importlib.util.find_spec(m)]
assert not present, f"the base install can import {present}"
try:
    import prx_data.training  # noqa: F401
except ImportError as exc:
    assert "prx-data[train]" in str(exc), f"unclear error: {exc}"
    print(f"base install: no torch, streaming or transformers; prx_data.training says: {exc}")
else:
    raise AssertionError("prx_data.training imported without the train extra")
PY
fi
run prx-data --help >/dev/null
step "prx-data sources --root $WORK/fresh (cwd $PWD)"
mkdir -p "$WORK/fresh/sources"  # a new root: a folder of specs without a Dagster home yet
run prx-data sources --root "$WORK/fresh"
# The CLI installs the packaged instance config (run limits, GPU pool) into a new root's home.
cmp "$WORK/fresh/.dagster/dagster.yaml" <(run "$VPY" -c 'from prx_data.app.ui import packaged_config; print(packaged_config("dagster.yaml"), end="")') \
  || { echo "the packaged dagster.yaml was not installed into the Dagster home" >&2; exit 1; }

if [ "$DEMO" = 1 ]; then
  step "prx-data demo --root $WORK/demo (cwd $PWD)"
  run prx-data demo --root "$WORK/demo" "${DEMO_SOURCES[@]}" >"$WORK/demo.log" 2>&1 || { tail -40 "$WORK/demo.log"; exit 1; }
  grep -q "published bucket streams" "$WORK/demo.log" || { tail -40 "$WORK/demo.log"; echo "demo printed no summary" >&2; exit 1; }
  test -f "$WORK/demo/.dagster/dagster.yaml" || { echo "the packaged dagster.yaml was not installed" >&2; exit 1; }
  step "demo done: $(grep -c . "$WORK/demo.log") lines of output"
  # The caption labels came from the MiniLM labeller (here without torch when --base).
  run env PRX_DATA_ROOT="$WORK/demo" PYTHONWARNINGS=ignore "$VPY" - <<'PY'
from collections import Counter
import lance
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.ingest.registry import load_registry
settings = get_settings()
paths = StoragePaths.from_settings(settings)
labels = Counter()
for name in load_registry(settings.sources_dir).sources:
    for row in lance.dataset(paths.raw_table(name)).to_table(columns=["label", "label_model"]).to_pylist():
        if row["label"]:
            labels[(row["label_model"], row["label"])] += 1
assert any("MiniLM" in (model or "") for model, _ in labels), f"no MiniLM labels in the demo tables: {labels}"
print("demo labels: " + ", ".join(f"{label} {n}" for (model, label), n in sorted(labels.items())) + f" ({sorted({m for m, _ in labels})})")
PY
fi

if [ "$UI" = 1 ]; then
  mkdir -p "$WORK/demo"
  PORT=$("$VPY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  step "prx-data ui --root $WORK/demo --port $PORT"
  # Not through run(): $! must be prx-data itself (env execs it), the process SIGTERM stops.
  "${CLEAN_ENV[@]}" prx-data ui --root "$WORK/demo" --port "$PORT" >"$WORK/ui.log" 2>&1 &
  UI_PID=$!
  # Up when the webserver answers and reports the prx_data code location loaded (not an error).
  run "$VPY" - "$PORT" "$UI_PID" <<'PY' || { tail -40 "$WORK/ui.log"; exit 1; }
import json, os, sys, time, urllib.request
port, pid = int(sys.argv[1]), int(sys.argv[2])
query = '{"query": "{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError { __typename ... on PythonError { message } } } } } }"}'
deadline, last = time.monotonic() + 300, None
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("prx-data ui exited before serving")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=query.encode(), headers={"Content-Type": "application/json"})
        entries = json.load(urllib.request.urlopen(request, timeout=5))["data"]["workspaceOrError"]["locationEntries"]
        last = {e["name"]: e["locationOrLoadError"] for e in entries}
        status = (last.get("prx_data") or {}).get("__typename")
        if status == "RepositoryLocation":
            print(f"UI serves the prx_data code location on 127.0.0.1:{port}")
            sys.exit(0)
        if status == "PythonError":
            sys.exit(f"code location failed to load: {last['prx_data'].get('message', '')[:2000]}")
    except OSError:
        pass
    time.sleep(1)
sys.exit(f"no code location served in time: {last}")
PY
  step "stopping the UI"
  kill -TERM "$UI_PID"
  # prx-data ui stops dagster dev's process group (up to 30 s) and its Ray head.
  for _ in $(seq 150); do kill -0 "$UI_PID" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$UI_PID" 2>/dev/null; then echo "prx-data ui did not stop on SIGTERM" >&2; exit 1; fi
  UI_PID=
  grep -q "stopping the Dagster UI" "$WORK/ui.log" || { tail -20 "$WORK/ui.log"; echo "the UI did not stop cleanly" >&2; exit 1; }
fi
if [ "$EXPLORE" = 1 ]; then
  PORT=$("$VPY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  step "prx-data explore --root $WORK/demo --port $PORT"
  "${CLEAN_ENV[@]}" prx-data explore --root "$WORK/demo" --port "$PORT" >"$WORK/explore.log" 2>&1 &
  EXPLORE_PID=$!
  # The pages a user opens first: the search page, the stats page, and a sample's own page.
  run "$VPY" - "$PORT" "$EXPLORE_PID" <<'PY' || { tail -40 "$WORK/explore.log"; exit 1; }
import os, re, sys, time, urllib.request
port, pid = int(sys.argv[1]), int(sys.argv[2])
base = f"http://127.0.0.1:{port}"
deadline = time.monotonic() + 120
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("prx-data explore exited before serving")
    try:
        urllib.request.urlopen(base + "/healthz", timeout=5).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("prx-data explore served nothing in time")
        time.sleep(0.5)
search = urllib.request.urlopen(base + "/", timeout=60).read().decode()
stats = urllib.request.urlopen(base + "/stats", timeout=60).read().decode()
samples = re.findall(r'href="(/sample/[^"]+)"', search)
assert samples, f"the search page lists no sample: {search[:2000]}"
page = urllib.request.urlopen(base + samples[0], timeout=60).read().decode()
assert "caption" in page.lower(), page[:2000]
print(f"explorer serves the demo corpus on 127.0.0.1:{port}: {len(samples)} samples listed, /stats {len(stats)} bytes")
PY
  kill -TERM "$EXPLORE_PID"
  for _ in $(seq 60); do kill -0 "$EXPLORE_PID" 2>/dev/null || break; sleep 0.5; done
  EXPLORE_PID=
fi
step "wheel check passed"
