"""A Ray started inside a process (ingest's fallback without an address; ``RunLocalRay`` of a
plain ``dagster dev``) is as closed as the command's head: token auth, loopback only, and the
process's environment restored after it, even when ``ray`` was imported first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")

SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import ray  # loaded before the switches are set, as in a Dagster run process
    from prx_data.ingest.unit_tasks import _ray
    from prx_data_tests.app.sockets import is_loopback, listening_sockets, process_tree

    os.environ.pop("PRX_RAY_ADDRESS", None)
    out = {}
    with _ray(1) as r:
        out["task"] = r.get(r.remote(lambda: 6 * 7).remote())
        address = r.get_runtime_context().gcs_address
        out["mode"] = os.environ.get("RAY_AUTH_MODE")
        token_path = os.environ["RAY_AUTH_TOKEN_PATH"]
        out["token_mode"] = oct(os.stat(token_path).st_mode & 0o777)
        seen = listening_sockets(process_tree(os.getpid()))
        out["names"] = sorted({c for *_x, c in seen})
        out["exposed"] = sorted(s for s in seen if not is_loopback(s[0]))
        no_token = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        probe = subprocess.run(
            [sys.executable, "-c", f"import ray; ray.init({address!r}, log_to_driver=False); print(ray.get(ray.remote(lambda: 7).remote()))"],
            env=no_token, capture_output=True, text=True, timeout=120,
        )
        out["probe"] = [probe.returncode, probe.stdout.split()]
    out["after"] = os.environ.get("RAY_AUTH_MODE")
    out["token_left"] = os.path.exists(token_path)
    print("RESULT " + json.dumps(out))
    """
)


def test_ingest_fallback_ray_has_a_token_and_stays_on_loopback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ENABLE_WINDOWS"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)  # prx_data_tests.app.sockets
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    print(out)
    assert out["task"] == 42
    assert out["mode"] == "token" and out["token_mode"] == "0o600"
    assert "gcs_server" in out["names"] and "raylet" in out["names"]
    assert out["exposed"] == [], f"listening beyond loopback: {out['exposed']}"
    assert out["probe"][0] != 0 and "7" not in out["probe"][1], "a driver without the token was let in"
    assert out["after"] is None and not out["token_left"]
