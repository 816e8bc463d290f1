"""Every third-party module prx_data imports (at module level or inside a function) comes from a
distribution pyproject.toml declares, so `pip install prx-data` brings what the code needs
instead of relying on what other packages happen to pull in."""

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
    # The demo's sample images (demo/images.py): `pip install prx-data[demo]`.
    "skimage": ("scikit-image", "pyproject.toml"),
    # The cluster profile's startup check of PostgreSQL (defs/cluster.py), in the cluster image.
    "psycopg2": ("psycopg2-binary", "deployments/docker/requirements-cluster.txt"),
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


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"]}


def test_the_scan_sees_function_level_imports():
    found = imported_modules()
    assert "prx_data/models/inference/gpu_env.py" in found["vllm"]  # imported inside a function
    assert "torch" in found and "json" in found and "prx_data" in found


def test_every_direct_import_is_declared():
    distributions = packages_distributions()
    required = declared()
    undeclared = []
    for module, files in sorted(third_party(imported_modules()).items()):
        if module in OPTIONAL:
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
