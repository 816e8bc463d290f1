"""The code-location image's Ray environment can run a KubeRay head: built from the image's own
requirement file (``deployments/docker/requirements-cluster.txt``, by ``scripts/ray_node_env.sh``
into a cached venv of its own, never the shared ``.venv``), ``ray start --head`` with the
dashboard starts, and the endpoints KubeRay's probes ask (KubeRay 1.7.0,
``ray-operator/controllers/ray/utils/constant.go``: the agent's ``/api/local_raylet_healthz``
and the dashboard's ``/api/gcs_healthz``) and Ray's own ``ray health-check`` answer.

Everything on loopback, with token auth on (the product's token and loopback switch,
``core.ray_auth``), so nothing is reachable from outside while the test runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from prx_data.app.local_ray import free_port
from prx_data.app.process_session import stop_session
from prx_data.core.ray_auth import head_env, remove_token, write_token
from prx_data_tests.app.sockets import is_loopback, listening_sockets, process_tree

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "deployments" / "docker" / "requirements-cluster.txt"


def test_the_cluster_requirements_carry_rays_dashboard_at_the_pinned_version():
    pyproject = (REPO / "pyproject.toml").read_text()
    lines = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    ray = [line for line in lines if line.startswith("ray[")]
    assert ray == ["ray[default]==2.60.0"], ray
    assert '"ray[data]==2.60.0"' in pyproject  # one Ray version in the image


@pytest.fixture(scope="module")
def node_python() -> str:
    if not shutil.which("bash"):
        pytest.skip("needs bash")
    started = time.monotonic()
    done = subprocess.run(["bash", str(REPO / "scripts" / "ray_node_env.sh")], capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"ray node env ready in {time.monotonic() - started:.1f}s")
    return done.stdout.strip().splitlines()[-1]


def _get(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode(errors="replace")
    except OSError as exc:
        return -1, str(exc)


def test_a_head_with_the_dashboard_passes_kuberays_probes_and_ray_health_check(node_python):
    ray_bin = str(Path(node_python).parent / "ray")
    token_path = write_token()
    temp = tempfile.mkdtemp(prefix="prx-rayimg-", dir="/tmp")
    gcs, dashboard, agent = free_port(), free_port(), free_port()
    env = {**os.environ, **head_env(token_path)}
    env.pop("PYTHONPATH", None)  # the image's environment only
    cmd = [
        ray_bin,
        "start",
        "--head",
        "--block",
        f"--port={gcs}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]
    log = Path(temp) / "head.log"
    with open(log, "wb") as out:
        head = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    token = Path(token_path).read_text().strip()
    try:
        healthy: dict[str, tuple[int, str]] = {}
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and head.poll() is None:
            healthy = {
                "gcs": _get(f"http://127.0.0.1:{dashboard}/api/gcs_healthz", token),
                "raylet": _get(f"http://127.0.0.1:{agent}/api/local_raylet_healthz", token),
            }
            if all(code == 200 and "success" in body for code, body in healthy.values()):
                break
            time.sleep(1)
        assert head.poll() is None, log.read_text(errors="replace")[-3000:]
        assert all(code == 200 and "success" in body for code, body in healthy.values()), (healthy, log.read_text(errors="replace")[-3000:])
        check = subprocess.run(
            [ray_bin, "health-check", f"--address=127.0.0.1:{gcs}"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr
        seen = listening_sockets(process_tree(head.pid))
        exposed = sorted(s for s in seen if not is_loopback(s[0]))
        names = {comm for *_x, comm in seen}
        print("head listening sockets:", sorted(seen))
        # The GCS and raylet gRPC servers bind every interface whatever the flags (docs/security.md),
        # behind the token; everything with a bind option, the dashboard included, is on loopback.
        assert not [s for s in exposed if s[1] in (dashboard, agent)], exposed
        assert "gcs_server" in names
    finally:
        stop_session(head.pid, grace_s=1.0)
        shutil.rmtree(temp, ignore_errors=True)
        remove_token(token_path)
