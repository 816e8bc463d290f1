"""The import-linter contracts of pyproject.toml ([tool.importlinter]): the package layering of
docs/architecture.md, Dagster only under prx_data.defs, no import cycles. Run as CI runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_lint_imports_keeps_every_contract():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    assert lint_imports.exists(), f"{lint_imports} missing: pip install -e '.[dev]' (import-linter)"
    done = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


PLANTED = {
    "plant/__init__.py": "",
    "plant/wiring.py": "import dagster as dg\nfrom dagster._core.storage.tags import MAX_RETRIES_TAG\n",
    "plant/worker.py": "def f():\n    from ray import _private\n    import streaming.base.util\n    import ray.data, __future__\n",
    "plant/compat/__init__.py": "from streaming.base.util import number_abbrev_to_int\nimport ray._private.ray_constants\n",
}
PLANTED_CONFIG = """
[tool.importlinter]
root_package = "plant"
include_external_packages = true
contract_types = ["private_apis: prx_data_tests.private_api_contract.PrivateApisContract"]

[[tool.importlinter.contracts]]
id = "private-apis-in-compat"
name = "private modules only in the adapters"
type = "private_apis"
adapters = ["plant.compat"]
internal_modules = ["streaming.base"]
"""


def test_the_private_api_contract_breaks_on_planted_imports(tmp_path):
    """The contract of pyproject.toml's type, on a package that imports private modules outside
    its adapter package: each such import is named; the adapter's own and public ones are not."""
    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "pyproject.toml").write_text(PLANTED_CONFIG)
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(lint_imports), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = " ".join(done.stdout.split())  # the report wraps long lines
    assert done.returncode != 0 and "1 broken" in out, done.stdout[-4000:] + done.stderr[-2000:]
    assert "plant.wiring (l.2) imports dagster._core.storage.tags" in out
    assert "plant.worker (l.2) imports ray._private" in out
    assert "plant.worker (l.3) imports streaming.base.util" in out
    assert "plant.compat" not in out.split("adapters:", 1)[1] and "ray.data" not in out and "__future__" not in out


def test_import_statements_are_read_into_module_paths():
    from prx_data_tests.private_api_contract import imported_paths, is_private

    assert imported_paths("from dagster import _core, asset as a  # why") == ["dagster", "dagster._core", "dagster.asset"]
    assert imported_paths("from streaming.base.format.base.reader import (") == ["streaming.base.format.base.reader"]
    assert imported_paths("import ray._raylet as raylet, os") == ["ray._raylet", "os"]
    assert [
        is_private(p, {"streaming.base"}) for p in ("ray._raylet", "streaming.base", "streaming.baseline", "__future__", "ray.data")
    ] == [
        True,
        True,
        False,
        False,
        False,
    ]
