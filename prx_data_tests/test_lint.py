"""The code stays clean under the linters CI runs: ruff check and ruff format over the package,
its tests and the benchmarks, and mypy over the same three.

The tools come from the venv running the tests (their pins are in the dev extra), and each runs
from the repo root so it reads the [tool.ruff] and [tool.mypy] config of pyproject.toml.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "prx_data", "prx_data_tests", "benchmarks"],
        ["ruff", "format", "--check", "prx_data", "prx_data_tests", "benchmarks"],
        ["mypy", "prx_data", "prx_data_tests", "benchmarks"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_lint_clean(command: list[str]) -> None:
    tool = BIN / command[0]
    assert tool.exists(), f"{tool} is missing: install the dev extra (pip install -e '.[dev]')"
    # mypy must analyse this tree, not an editable install of another checkout on sys.path.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([str(tool), *command[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
