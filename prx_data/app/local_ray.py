"""One local Ray for a whole command (``prx-data run``, ``demo``, ``ui``), shared by every run and
step it starts, instead of a Ray started and stopped per run or per step.

A loopback head (``ray start --head --block``) in its own process group: every Dagster run of
the command connects to it through ``PRX_RAY_ADDRESS``, its worker processes stay warm between
runs, and it is stopped as a whole when the command ends (never with ``ray stop``, which would
stop every Ray on the machine). Token auth is off: the head listens on 127.0.0.1 only, and Ray
2.60 turns auth on by default for ``ray start`` and then prints a notice on every connect.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Both live in core (ingest joins the command's Ray through them) and are used here.
from prx_data.core.quiet import quiet_ray_env
from prx_data.core.ray_tasks import ADDRESS_VAR


class LocalRayError(RuntimeError):
    """The local Ray head did not start; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class LocalRayHead:
    address: str
    process: subprocess.Popen
    temp_dir: str
    started_s: float

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process_group(self.process, timeout_s)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def stop_process_group(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM to the process's own group, SIGKILL to what is left after ``timeout_s``."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass


def start_head(num_cpus: int | None = None, timeout_s: float = 90.0) -> LocalRayHead:
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if not ray_bin:
        raise LocalRayError("the `ray` command is not installed next to this Python")
    port = free_port()
    # A short path: Ray's unix socket paths must stay under ~107 bytes.
    temp = tempfile.mkdtemp(prefix="prx-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    cmd = [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={temp}"]
    if num_cpus:
        cmd.append(f"--num-cpus={num_cpus}")
    started = time.monotonic()
    log_path = Path(temp) / "head.log"
    log = open(log_path, "wb")  # noqa: SIM115 - kept by the child
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **quiet_ray_env()})
    log.close()
    address = f"127.0.0.1:{port}"
    deadline = started + timeout_s
    while time.monotonic() < deadline and process.poll() is None and not _ready(address, log_path):
        time.sleep(0.3)
    if process.poll() is not None or not _ready(address, log_path):
        tail = log_path.read_text(errors="replace")[-2000:]
        stop_process_group(process)
        shutil.rmtree(temp, ignore_errors=True)
        raise LocalRayError(f"the local Ray head did not start in {timeout_s:.0f}s:\n{tail}")
    return LocalRayHead(address=address, process=process, temp_dir=temp, started_s=time.monotonic() - started)


def _ready(address: str, log_path: Path) -> bool:
    """The GCS port answers and ``ray start`` has reported the runtime up (the port opens before
    the raylet registers)."""
    host, port = address.rsplit(":", 1)
    if not listening(int(port), host):
        return False
    return b"Ray runtime started" in log_path.read_bytes()


@contextlib.contextmanager
def shared_local_ray(log=print) -> Iterator[str | None]:
    """``PRX_RAY_ADDRESS`` set to a local head for the duration of the block, unless it is set
    already (a cluster, or a head shared by tests) or the profile is not local. Yields the
    address in use (None when none could be started: each run then starts its own Ray)."""
    # lazy: pulls in pyarrow, numpy, pydantic
    from prx_data.core.settings import get_settings

    settings = get_settings()
    if settings.ray_address or settings.env != "local":
        yield settings.ray_address
        return
    try:
        head = start_head()
    except LocalRayError as exc:
        log(f"warning: no shared local Ray ({exc}); each run starts its own")
        yield None
        return
    saved = {k: os.environ.get(k) for k in (ADDRESS_VAR, *quiet_ray_env())}
    os.environ.update({ADDRESS_VAR: head.address, **quiet_ray_env()})
    get_settings.cache_clear()
    try:
        yield head.address
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        get_settings.cache_clear()
        head.stop()
