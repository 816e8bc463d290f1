"""One local Ray for a whole command (``prx-data run``, ``demo``, ``ui``), shared by every run and
step it starts, instead of a Ray started and stopped per run or per step.

A head (``ray start --head --block``) in a session of its own: every Dagster run of the command
connects to it through ``PRX_RAY_ADDRESS``, its worker processes stay warm between runs, and it
is stopped as a whole when the command ends (never with ``ray stop``, which would stop every Ray
on the machine).

Who can reach it (Ray 2.60, measured; docs/security.md, "Local Ray on loopback"):
- ``--node-ip-address=127.0.0.1`` alone is rewritten by ``ray start`` to the machine's external
  address (``resolve_ip_for_localhost``), so the client server and the runtime-env agent listen
  there. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray keep 127.0.0.1 as the node address:
  the client server, agents, dashboard and metrics then bind loopback.
- The GCS, the raylet's two ports and each worker's gRPC server still bind every interface (the
  C++ gRPC servers have no bind option). Token auth therefore stays on, with a random token made
  for this command only, in a 0600 file in a private folder (0700), passed by path
  (``RAY_AUTH_TOKEN_PATH``), never printed, and deleted with the folder.

Children die with the command: a watchdog (``prx_data.app.ray_watchdog``) in its own session
holds the read end of a pipe only this process writes to; when this process ends in any way,
``kill -9`` included, the pipe closes and the watchdog stops the head's session. A record per
head under the Dagster home lets the next command stop a head whose watchdog was killed too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prx_data.app.process_session import (
    is_alive,
    session_members,
    start_ticks,
    stop_session,
)

# Both live in core (ingest joins the command's Ray through them) and are used here.
from prx_data.core.ray_auth import head_env, write_token
from prx_data.core.ray_tasks import ADDRESS_VAR

PACKAGE_PARENT = Path(__file__).resolve().parents[2]
RECORDS_DIR = "local_ray"


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
    env: dict[str, str]
    log_path: Path
    started: float
    watchdog: subprocess.Popen | None = None
    record: Path | None = None
    _pipe_w: int | None = field(default=None, repr=False)
    started_s: float | None = None

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until the runtime is up; on failure stop what started and say why."""
        if self.started_s is not None:
            return
        deadline = self.started + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None and not _ready(self.address, self.log_path):
            time.sleep(0.1)
        if self.process.poll() is not None or not _ready(self.address, self.log_path):
            tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            self.stop()
            raise LocalRayError(f"the local Ray head did not start in {timeout_s:.0f}s:\n{tail}")
        self.started_s = time.monotonic() - self.started

    def stop(self, timeout_s: float = 5.0) -> None:
        """Closing the pipe is the stop signal: the watchdog stops the session and cleans up.
        Done here as well, so a dead watchdog costs nothing but the wait."""
        if self._pipe_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe_w)
            self._pipe_w = None
        if self.watchdog is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog.wait(timeout=timeout_s)
        stop_session(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        shutil.rmtree(os.path.dirname(self.env["RAY_AUTH_TOKEN_PATH"]), ignore_errors=True)
        if self.record is not None:
            with contextlib.suppress(OSError):
                self.record.unlink()


def stop_process_group(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM to the process's own group, SIGKILL to what is left after ``timeout_s``."""
    import signal

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


def clean_stale_heads(records_dir: Path, log=print) -> int:
    """Stop the heads recorded under ``records_dir`` whose command is gone (its watchdog was
    killed with it, or the machine slept through it). Heads of live commands are left alone."""
    stopped = 0
    for record in sorted(records_dir.glob("*.json")) if records_dir.is_dir() else []:
        try:
            info = json.loads(record.read_text())
            owner, owner_ticks, sid = int(info["owner_pid"]), info.get("owner_ticks"), int(info["sid"])
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                record.unlink()
            continue
        if is_alive(owner, owner_ticks):
            continue
        # The kernel does not reuse a pid while a process still has it as its session id, so
        # members of `sid` are the dead command's head.
        if session_members(sid):
            stopped += 1
            stop_session(sid)
            log(f"stopped a local Ray head left by process {owner} (session {sid})")
        for folder in (info.get("temp_dir") or "").split(os.pathsep):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            record.unlink()
    return stopped


def start_head(
    num_cpus: int | None = None, records_dir: Path | None = None, port: int | None = None, token_path: str | None = None
) -> LocalRayHead:
    """Start the head and its watchdog and return at once; ``wait_ready`` blocks until it is up
    (so a command overlaps the head's start-up with its own work). ``port`` and ``token_path``:
    an address and token handed out before the head was started (``starting_local_ray(lazy=True)``)."""
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if not ray_bin:
        raise LocalRayError("the `ray` command is not installed next to this Python")
    port = port or free_port()
    # A short path: Ray's unix socket paths must stay under ~107 bytes. mkdtemp makes it 0700.
    temp = tempfile.mkdtemp(prefix="prx-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    token_path = token_path or write_token()
    env = head_env(token_path)
    cleanup = os.pathsep.join((temp, os.path.dirname(token_path)))
    cmd = [
        ray_bin,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        # Not 10001: two commands on one machine would fight over it.
        f"--ray-client-server-port={free_port()}",
        # Two Python processes this head has no use for, ~0.3 s of CPU each to start on a machine
        # busy with the command's own start: the log monitor only feeds worker output to
        # drivers, and every run joins with log_to_driver=False; the autoscaler monitor has
        # nothing to scale on one fixed node.
        "--include-log-monitor=false",
        "--no-monitor",
    ]
    if num_cpus:
        cmd.append(f"--num-cpus={num_cpus}")
    started = time.monotonic()
    log_path = Path(temp) / "head.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **env}
        )
    head = LocalRayHead(address=f"127.0.0.1:{port}", process=process, temp_dir=temp, env=env, log_path=log_path, started=started)
    read_end, head._pipe_w = os.pipe()  # both non-inheritable: no other child holds the write end
    record = Path(records_dir or temp) / f"{os.getpid()}-{process.pid}.json"
    try:
        watchdog_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")) if p)}
        head.watchdog = subprocess.Popen(
            [sys.executable, "-m", "prx_data.app.ray_watchdog", str(process.pid), cleanup, str(record)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=watchdog_env,
        )
    finally:
        os.close(read_end)
    if records_dir is not None:
        records_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(
            json.dumps(
                {
                    "owner_pid": os.getpid(),
                    "owner_ticks": start_ticks(os.getpid()),
                    "sid": process.pid,
                    "watchdog_pid": head.watchdog.pid,
                    "temp_dir": cleanup,
                    "address": head.address,
                }
            )
        )
        head.record = record
    return head


def _ready(address: str, log_path: Path) -> bool:
    """The GCS port answers and ``ray start`` has reported the runtime up (the port opens before
    the raylet registers)."""
    try:
        if b"Ray runtime started" not in log_path.read_bytes():
            return False
    except OSError:
        return False
    host, port = address.rsplit(":", 1)
    return listening(int(port), host)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def shared_local_ray(log=print, records_dir: Path | None = None) -> Iterator[str | None]:
    """``PRX_RAY_ADDRESS`` set to a local head for the duration of the block, unless it is set
    already (a cluster, or a head shared by tests) or the profile is not local. Yields the
    address in use (None when none could be started: each run then starts its own Ray).

    ``records_dir`` (a local folder, e.g. under the Dagster home): where the head is recorded so
    the next command can stop it if this one dies with its watchdog; stale heads found there are
    stopped first."""
    with starting_local_ray(log, records_dir) as pending:
        yield pending.wait()


class PendingRay:
    """A head being started, or to be started on first use: ``wait()`` returns its address once
    it is up (None without one)."""

    def __init__(self, head: LocalRayHead | None, address: str | None, log, start: Callable[[], LocalRayHead] | None = None) -> None:
        self.head, self._address, self._log, self._start = head, address, log, start
        self._failed: Exception | None = None

    def _started(self) -> LocalRayHead | None:
        # A start that failed fails every later caller too, instead of letting it dial an
        # address nothing listens on.
        if self._failed is not None:
            raise self._failed
        if self.head is None and self._start is not None:
            start, self._start = self._start, None
            try:
                self.head = start()
            except (LocalRayError, OSError) as exc:
                self._failed = exc
                raise
        return self.head

    def prefetch(self) -> None:
        """Start the head now without waiting for it; a failure is kept for ``wait_or_fail``."""
        with contextlib.suppress(LocalRayError, OSError):
            self._started()

    def wait_or_fail(self) -> None:
        """For a stage that needs Ray now (``core.ray_tasks.ray_provider("start", ...)``): the
        runs were built to join this head, so a head that did not start fails the stage, saying
        why, instead of each run starting a Ray of its own."""
        try:
            head = self._started()
            if head is not None:
                head.wait_ready()
        except (LocalRayError, OSError) as exc:
            self._failed = self._failed or exc
            raise LocalRayError(f"{exc}\nSet {ADDRESS_VAR} to a running Ray to use that instead.") from None

    def wait(self) -> str | None:
        """``wait_or_fail`` for a caller that builds its runs after this: a head that did not
        start leaves no address set, so each run starts its own Ray."""
        try:
            self.wait_or_fail()
        except LocalRayError as exc:
            self._log(f"warning: no shared local Ray ({exc}); each run starts its own")
            self.head = None
            os.environ.pop(ADDRESS_VAR, None)
            return None
        return self._address if self.head is None else self.head.address


@contextlib.contextmanager
def starting_local_ray(log=print, records_dir: Path | None = None, lazy: bool = False) -> Iterator[PendingRay]:
    """Like ``shared_local_ray``, but yields while the head is still starting: the caller does
    its own work meanwhile and calls ``wait()`` (or ``wait_or_fail()``) when it needs Ray.

    ``lazy``: the address and token are handed out now and the head starts on the first
    ``wait``, so a command whose runs never need Ray starts none (a head costs ~3 s of CPU to
    start and ~2 s to stop, measured on this 2-core machine)."""
    # lazy: pulls in pyarrow, numpy, pydantic
    from prx_data.core.settings import get_settings

    settings = get_settings()
    if settings.ray_address or settings.env != "local":
        yield PendingRay(None, settings.ray_address, log)
        return
    if records_dir is not None:
        clean_stale_heads(records_dir, log)
    if lazy:
        port, token_path = free_port(), write_token()
        address, env = f"127.0.0.1:{port}", head_env(token_path)
        pending = PendingRay(None, address, log, start=lambda: start_head(records_dir=records_dir, port=port, token_path=token_path))
    else:
        try:
            head = start_head(records_dir=records_dir)
        except (LocalRayError, OSError) as exc:
            log(f"warning: no shared local Ray ({exc}); each run starts its own")
            yield PendingRay(None, None, log)
            return
        pending, address, env, token_path = PendingRay(head, None, log), head.address, head.env, head.env["RAY_AUTH_TOKEN_PATH"]
    try:
        with _environment({ADDRESS_VAR: address, **env}):
            get_settings.cache_clear()
            try:
                yield pending
            finally:
                get_settings.cache_clear()
    finally:
        if pending.head is not None:
            pending.head.stop()
        shutil.rmtree(os.path.dirname(token_path), ignore_errors=True)
