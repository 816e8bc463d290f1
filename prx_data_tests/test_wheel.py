"""The package works as a wheel away from the checkout, on the pipeline's base install
(scripts/wheel_check.sh --base): no torch, streaming or transformers can be imported there.

Two runs of the script, each within the 3 minutes a test may take: build, install into a fresh
venv over the cached base install (scripts/base_env.sh: built once per pyproject.toml, 26 s with
uv here), import the code location and check the declared requirements from the wheel, then
`prx-data ui` serving the code location over HTTP in one, `prx-data demo` and `prx-data explore`
serving the demo's corpus in the other (58 s and 70 s here once the base install is cached;
251 s for the second on a machine loaded to 16 runnable processes).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wheel_check(*args: str) -> str:
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheel_check.sh"), "--base", *args],
        capture_output=True,
        text=True,
        timeout=380,
        cwd="/tmp",
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "prx_data modules from the wheel" in out and "declared requirements met" in out
    assert "base install: no torch, streaming or transformers" in out and "pip install 'prx-data[train]'" in out
    assert "wheel check passed" in out
    return out


@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("git") is None, reason="the script copies the tree with git ls-files")
def test_wheel_on_the_base_install_serves_the_ui_from_another_folder():
    out = _wheel_check("--no-demo")
    assert "UI serves the prx_data code location" in out


@pytest.mark.timeout(400)
@pytest.mark.skipif(shutil.which("git") is None, reason="the script copies the tree with git ls-files")
def test_wheel_on_the_base_install_runs_the_demo_and_the_explorer():
    out = _wheel_check("--no-ui", "--explore")
    assert "demo done" in out and "explorer serves the demo corpus" in out


def test_the_config_files_are_package_data():
    import tomllib

    from prx_data.app.ui import packaged_config

    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "resources/*.yaml" in package_data["prx_data.app"]
    assert "max_concurrent_runs" in packaged_config("dagster.yaml")
    assert "prx_data.definitions" in packaged_config("workspace.yaml")


def test_a_users_dagster_yaml_is_kept_and_the_workspace_refreshed(tmp_path):
    from prx_data.app.ui import install_config, packaged_config

    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # the user's own
    install_config(tmp_path, "dagster.yaml", overwrite=False)
    assert (tmp_path / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    (tmp_path / "workspace.yaml").write_text("load_from: []\n")  # an older package's
    install_config(tmp_path, "workspace.yaml", overwrite=True)
    assert (tmp_path / "workspace.yaml").read_text() == packaged_config("workspace.yaml")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert install_config(fresh, "dagster.yaml", overwrite=False).read_text() == packaged_config("dagster.yaml")
