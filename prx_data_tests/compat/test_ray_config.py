"""Pins what prx_data.compat.ray_config relies on in Ray: the private config objects an
imported Ray reads its auth mode and loopback switch from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prx_data.compat import ray_config

REPO = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import json, os
    import ray  # imported before the switches are set, as in a Dagster run process
    import ray._private.ray_constants as constants
    from prx_data.compat.ray_config import in_process_ray_auth

    out = {"before": constants.ENABLE_RAY_CLUSTER}
    with in_process_ray_auth() as env:
        out["inside"] = constants.ENABLE_RAY_CLUSTER
        out["mode"] = os.environ.get("RAY_AUTH_MODE")
        token = env["RAY_AUTH_TOKEN_PATH"]
        out["token_file"] = os.path.isfile(token)
    out["after"] = constants.ENABLE_RAY_CLUSTER
    out["mode_after"] = os.environ.get("RAY_AUTH_MODE")
    out["token_left"] = os.path.exists(token)
    print("RESULT " + json.dumps(out))
    """
)


def test_installed_ray_is_the_version_the_adapter_was_written_for() -> None:
    assert ray_config.version_mismatch() is None, ray_config.version_mismatch()


def test_the_private_config_objects_exist() -> None:
    import ray._private.ray_constants as constants
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    assert callable(Config.initialize) and callable(AuthenticationTokenLoader.instance().reset_cache)
    assert isinstance(constants.ENABLE_RAY_CLUSTER, bool)


def test_an_imported_ray_sees_the_loopback_switch_and_gets_it_back(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ENABLE_WINDOWS"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out == {
        "before": True,
        "inside": False,
        "mode": "token",
        "token_file": True,
        "after": True,
        "mode_after": None,
        "token_left": False,
    }
