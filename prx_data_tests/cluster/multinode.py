"""A Ray cluster of isolated nodes on one machine: what a KubeRay cluster looks like to a task.

A head (the driver's machine: it offers CPUs but not the custom resource ``ISOLATED``) and
worker nodes, each started inside its own mount namespace with an empty private ``/tmp``
(``unshare --mount --propagation private`` + ``mount -t tmpfs``; needs root on Linux, which CI
has). A worker node sees the repository and the shared folders it is told about, but neither
the driver's temp folders (pytest's ``tmp_path`` is under ``/tmp``) nor the other nodes':
a task that opens a path only the driver can see fails, as it would on a second machine.
Every worker node offers the custom resource ``ISOLATED`` and the head does not, so work lands
on the isolated nodes only when it asks for the resource: PRX_RAY_TASK_RESOURCES
(``TASK_RESOURCES_VAR``) for the pipeline, as a KubeRay worker group's custom resource would.
``Cluster.head_task_names`` tells which Ray tasks ran on the head (from its workers' logs).

Token auth is on, as on a production cluster (Ray 2.60's default; KubeRay's ``authOptions``):
the head and the driver read a token of the cluster's own by path and the worker nodes, whose
``/tmp`` hides that file, get it as ``RAY_AUTH_TOKEN``, every node with ``RAY_AUTH_MODE=token``.
Not the loopback switch: a node that joins a head refuses it (Ray: "Multi-node Ray clusters are
not supported"), so the nodes listen on the machine's address too, behind the token (the test
lists them and shows a call without the token refused).
``Cluster.driver_env`` is what a driver needs to join.

Ray's ports: the GCS, the client server and every agent port are free loopback ports picked
here (nothing collides with another Ray on the machine); the nodes are stopped by their process
groups, never with ``ray stop`` (which stops every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from prx_data.app.process_session import stop_session
from prx_data.core.ray_auth import LOOPBACK_SWITCH, head_env, remove_token, write_token

REPO = Path(__file__).resolve().parents[2]

ISOLATED = "prx_isolated"
# What the test asks of its tasks (and of nothing else): any positive share of the resource.
TASK_RESOURCES = {ISOLATED: 0.01}
TASK_RESOURCES_VAR = {"PRX_RAY_TASK_RESOURCES": json.dumps(TASK_RESOURCES)}
# Ray's worker processes write this marker and the task's name to their log when a task starts.
_TASK_MARKER = re.compile(r":task_name:([A-Za-z0-9_.]+)")
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}


class ClusterUnavailable(RuntimeError):
    """This machine cannot isolate nodes (not root, no unshare): the message says what is missing."""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all held open until all are chosen, so none repeats."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _ray_bin() -> str:
    found = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if not found:
        raise ClusterUnavailable("the `ray` command is not installed next to this Python")
    return found


NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


def _node_ports(*extra: str) -> list[str]:
    """Every port flag of a node (plus ``extra`` flags) with its own distinct free port."""
    flags = [*NODE_PORT_FLAGS, *extra]
    return [f"{flag}={port}" for flag, port in zip(flags, _free_ports(len(flags)))]


def check_isolation_possible() -> None:
    if sys.platform != "linux":
        raise ClusterUnavailable("isolated nodes need Linux mount namespaces")
    if os.geteuid() != 0:
        raise ClusterUnavailable("isolated nodes need root (unshare --mount, mount -t tmpfs)")
    if not shutil.which("unshare"):
        raise ClusterUnavailable("`unshare` (util-linux) is not installed")


@dataclass
class Cluster:
    address: str  # the GCS address drivers pass to ray.init
    temp: str  # the head's session folder (the driver's machine)
    head: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    keep: dict[str, str] = field(default_factory=dict)  # code folders under /tmp the nodes still see
    driver_env: dict[str, str] = field(default_factory=dict)  # token auth and loopback for a driver
    saved_env: dict[str, str | None] = field(default_factory=dict)  # what connect_and_wait replaced

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in self.logs if p.exists())

    def head_task_names(self) -> set[str]:
        """The names of the Ray tasks that ran on the head (its worker processes' logs live in
        the head's session folder, on the driver's disk; the worker nodes' are out of sight)."""
        names: set[str] = set()
        for log in Path(self.temp).glob("session_*/logs/worker-*"):
            names.update(_TASK_MARKER.findall(log.read_text(errors="replace")))
        return names

    def kill_worker(self, k: int) -> None:
        """A lost node: its whole process tree (raylet, workers) killed at once."""
        _stop_group(self.workers[k], signal.SIGKILL)

    def connect_and_wait(self, timeout_s: float = 120.0) -> None:
        """``ray.init`` this process as the cluster's driver; return once every node is alive."""
        # lazy: ray is a measured heavy import
        import ray

        from prx_data.compat.ray_config import refresh_loaded_ray

        # Restored by stop(): the token file goes with the cluster, and a later test in this
        # process must talk to the session's head with the session's token again.
        self.saved_env = {name: os.environ.get(name) for name in (*self.driver_env, "RAY_AUTH_TOKEN")}
        os.environ.pop("RAY_AUTH_TOKEN", None)  # would win over the path
        os.environ.update(self.driver_env)
        refresh_loaded_ray()
        ray.init(address=self.address, include_dashboard=False, configure_logging=False, log_to_driver=False)
        want = len(self.workers) + 1
        _wait_for(lambda: sum(1 for n in ray.nodes() if n["Alive"]) == want, f"{want} live nodes", self, timeout_s)

    def stop(self) -> None:
        # By session, as `prx-data` stops its own head: after a SIGTERM to its process group a
        # node was still up when the 30 s wait ran out, every time (teardowns took 32 s).
        for proc in [*self.workers, self.head]:
            stop_session(proc.pid, grace_s=1.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        shutil.rmtree(self.temp, ignore_errors=True)
        if self.driver_env.get("RAY_AUTH_TOKEN_PATH"):
            remove_token(self.driver_env["RAY_AUTH_TOKEN_PATH"])
        if self.saved_env:
            from prx_data.compat.ray_config import refresh_loaded_ray

            for name, value in self.saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self.saved_env = {}
            refresh_loaded_ray()
        for mount_point in self.keep.values():  # empty on the host: the binds were the nodes' own
            with contextlib.suppress(OSError):
                os.rmdir(mount_point)


def _stop_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _wait_for(predicate, what: str, cluster: Cluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in [cluster.head, *cluster.workers]:
            if proc.poll() is not None:
                raise RuntimeError(f"a Ray node exited ({proc.args!r}) while waiting for {what}:\n{cluster.log_tail()}")
        if predicate():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}:\n{cluster.log_tail()}")


def _code_under_tmp() -> dict[str, str]:
    """What a node must still see when its /tmp is replaced: the repository and this Python's
    environment, when they live under /tmp (CI may clone there). Each gets a mount point outside
    /tmp to be carried across: {path under /tmp: mount point}."""
    paths = sorted({str(p) for p in (REPO, Path(sys.prefix).resolve()) if str(p).startswith("/tmp/")})
    outer = [p for p in paths if not any(p != q and p.startswith(q + "/") for q in paths)]
    return {p: tempfile.mkdtemp(prefix="prx-keep-", dir="/dev/shm") for p in outer}


def _private_tmp_keeping(keep: dict[str, str]) -> str:
    """Shell steps, run inside the node's mount namespace: an empty tmpfs on /tmp, with only the
    code folders of ``keep`` bound back at their own paths (never pytest's folders)."""
    steps = [f"mount --bind {shlex.quote(p)} {shlex.quote(m)}" for p, m in keep.items()]
    steps.append("mount -t tmpfs tmpfs /tmp")
    for p, m in keep.items():
        steps += [f"mkdir -p {shlex.quote(p)}", f"mount --bind {shlex.quote(m)} {shlex.quote(p)}"]
    return " && ".join(steps)


def start_cluster(
    n_workers: int = 2,
    cpus_per_worker: int = 1,
    *,
    head_cpus: int = 1,
    env: dict[str, str] | None = None,
    log_dir: str | None = None,
    timeout_s: float = 120.0,
) -> Cluster:
    """Start a head (``head_cpus``, no ``ISOLATED``) and ``n_workers`` isolated worker nodes (``connect_and_wait`` then
    joins them as the driver and waits until every node is up).

    ``env``: extra variables for every node's processes (the tasks inherit them), e.g. the
    repository on ``PYTHONPATH``. Logs go to ``log_dir`` (default: the head's temp folder).
    """
    check_isolation_possible()
    ray = _ray_bin()
    temp = tempfile.mkdtemp(prefix="prx-cluster-")
    logs = Path(log_dir or temp)
    port = _free_ports(1)[0]
    token_path = write_token()
    # Token auth as on a production cluster. Not the loopback switch: a node that joins a head
    # refuses it ("Multi-node Ray clusters are not supported"), and without it on one node Ray
    # advertises every node, the head's GCS included, at the machine's address.
    auth = {**head_env(token_path), LOOPBACK_SWITCH: "1"}
    node_env = {**os.environ, **RAY_ENV, **auth, **(env or {})}
    node_env.pop("RAY_AUTH_TOKEN", None)
    # The worker nodes cannot see the token file (their /tmp is their own): the value instead.
    worker_env = {**node_env, "RAY_AUTH_TOKEN": Path(token_path).read_text().strip()}
    worker_env.pop("RAY_AUTH_TOKEN_PATH", None)
    head_log = logs / "head.log"
    head_cmd = [
        ray,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={head_cpus}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        *_node_ports("--ray-client-server-port"),
    ]
    with open(head_log, "wb") as out:
        head = subprocess.Popen(head_cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=node_env)
    cluster = Cluster(address=f"127.0.0.1:{port}", temp=temp, head=head, logs=[head_log], keep=_code_under_tmp(), driver_env=auth)
    try:
        _wait_for(lambda: b"Ray runtime started" in head_log.read_bytes(), "the head", cluster, timeout_s)
        for k in range(n_workers):
            start = [
                ray,
                "start",
                f"--address={cluster.address}",
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--num-cpus={cpus_per_worker}",
                f"--resources={json.dumps({ISOLATED: 1})}",
                "--disable-usage-stats",
                *_node_ports(),
            ]
            # The node's own empty /tmp: Ray's session folder, the workers' temp files and
            # sockets live there, and the driver's /tmp (and tmp_path) is out of sight.
            script = f"{_private_tmp_keeping(cluster.keep)} && exec {shlex.join(start)}"
            log = logs / f"worker{k}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=worker_env,
                )
            cluster.workers.append(proc)
            cluster.logs.append(log)
    except BaseException:
        cluster.stop()
        raise
    return cluster
