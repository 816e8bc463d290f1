"""The command's local Ray: on loopback with token auth, stopped in well under a second, and
gone with the command even when the command is killed with SIGKILL.

Real ``ray start`` heads and real ``prx-data run`` / ``prx-data ui`` subprocesses; the socket
listing (``/proc``) of their process trees is the proof of what they expose."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prx_data.app.process_session import session_members
from prx_data_tests.app.helpers import cli, cli_env, tiny_root
from prx_data_tests.app.sockets import is_loopback, listening_sockets, process_tree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _watch(process: subprocess.Popen, until, timeout_s: float) -> set[tuple[str, int, str]]:
    """Union of the listening sockets of ``process``'s tree, sampled until ``until(seen)`` or
    the process ends."""
    seen: set[tuple[str, int, str]] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        seen |= listening_sockets(process_tree(process.pid))
        if until(seen):
            break
        time.sleep(0.2)
    return seen


def _gone(pids, timeout_s: float = 15.0) -> list[int]:
    from prx_data.app.process_session import is_alive

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if is_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def test_run_and_ui_listen_on_loopback_only(tmp_path):
    root = tiny_root(tmp_path / "data")
    env = {**cli_env(tmp_path), "PRX_LOCAL_MAX_ROWS": "0"}  # every stage on Ray: the head starts
    with open(tmp_path / "run.log", "w") as log:
        run = subprocess.Popen(cli("run", "--root", str(root)), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        seen = set()
        while run.poll() is None:
            seen |= _watch(run, lambda s: False, 1.0)
        assert run.wait() == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    names = {comm for _ip, _port, comm in seen}
    assert "gcs_server" in names and "raylet" in names, seen  # the head was seen listening
    exposed = sorted(s for s in seen if not is_loopback(s[0]))
    print("prx-data run listening sockets:", sorted(seen))
    assert exposed == [], f"listening beyond loopback: {exposed}"

    port = _free_port()
    ui_log = tmp_path / "ui.log"
    with open(ui_log, "w") as log:
        ui = subprocess.Popen(
            cli("ui", "--root", str(root), "--port", str(port)), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:

        def up(s):
            return "open http://" in ui_log.read_text() and any(c == "gcs_server" for *_x, c in s) and any(p == port for _i, p, _c in s)

        seen = _watch(ui, up, 300)
        assert up(seen), ui_log.read_text()[-3000:]
        seen |= _watch(ui, lambda s: False, 3)  # the code server and daemon settle
        tree = process_tree(ui.pid)
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=120)
    finally:
        if ui.poll() is None:
            os.killpg(ui.pid, signal.SIGKILL)
    print("prx-data ui listening sockets:", sorted(seen))
    exposed = sorted(s for s in seen if not is_loopback(s[0]))
    assert exposed == [], f"listening beyond loopback: {exposed}"
    assert _gone(tree, 30) == [], "processes of `prx-data ui` outlived it"


def test_head_is_token_protected_and_stops_within_a_second(tmp_path, monkeypatch):
    from prx_data.app.local_ray import starting_local_ray
    from prx_data.core.settings import get_settings

    monkeypatch.delenv("PRX_RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PRX_DATA_ROOT", str(tmp_path / "data"))
    get_settings.cache_clear()
    records = tmp_path / "records"
    with starting_local_ray(records_dir=records) as pending:
        address = pending.wait()
        head = pending.head
        assert head is not None
        assert address == head.address and os.environ["PRX_RAY_ADDRESS"] == address
        token_path = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        assert os.environ["RAY_AUTH_MODE"] == "token"
        assert stat.S_IMODE(token_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_path.parent.stat().st_mode) == 0o700
        token = token_path.read_text()
        assert len(token) >= 32
        assert len(list(records.glob("*.json"))) == 1
        # A driver without the token is refused.
        no_token = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import ray; ray.init({address!r}, log_to_driver=False); print(ray.get(ray.remote(lambda: 7).remote()))",
            ],
            env=no_token,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert probe.returncode != 0 and "7" not in probe.stdout.split()
        # The token is in no log the head wrote.
        for dirpath, _dirs, files in os.walk(head.temp_dir):
            for name in files:
                path = os.path.join(dirpath, name)
                if path != str(token_path) and os.path.isfile(path) and not os.path.islink(path):
                    try:
                        assert token.encode() not in Path(path).read_bytes(), path
                    except OSError:
                        pass
        sid = head.process.pid
        assert len(session_members(sid)) >= 3
        started = time.monotonic()
    stop_s = time.monotonic() - started
    get_settings.cache_clear()
    print(f"local Ray stop: {stop_s:.2f}s")
    assert stop_s < 1.5
    assert session_members(sid) == []
    assert not os.path.exists(head.temp_dir) and not token_path.exists()
    assert list(records.glob("*.json")) == []
    assert "PRX_RAY_ADDRESS" not in os.environ or os.environ["PRX_RAY_ADDRESS"] != address


def test_kill_9_of_run_stops_its_ray(tmp_path):
    root = tiny_root(tmp_path / "data", images=2)
    env = {**cli_env(tmp_path), "PRX_LOCAL_MAX_ROWS": "0"}  # every stage on Ray: the head starts
    with open(tmp_path / "run.log", "w") as log:
        run = subprocess.Popen(cli("run", "--root", str(root)), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    records = root / ".dagster" / "local_ray"
    try:
        deadline = time.monotonic() + 300
        record = None
        while time.monotonic() < deadline and run.poll() is None:
            found = list(records.glob("*.json")) if records.is_dir() else []
            if found:
                record = json.loads(found[0].read_text())
                if len(session_members(record["sid"])) >= 3:  # gcs, raylet, ... are up
                    break
            time.sleep(0.2)
        assert record is not None, (tmp_path / "run.log").read_text()[-3000:]
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    folders = record["temp_dir"].split(os.pathsep)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (session_members(record["sid"]) or any(map(os.path.exists, folders))):
        time.sleep(0.1)
    assert session_members(record["sid"]) == [], "the Ray head outlived `kill -9` of its command"
    assert not any(os.path.exists(p) for p in record["temp_dir"].split(os.pathsep))
    assert list(records.glob("*.json")) == []


STALE_OWNER = """
import sys, time
from pathlib import Path
from prx_data.app.local_ray import start_head
head = start_head(records_dir=Path(sys.argv[1]))
print(head.process.pid, head.watchdog.pid, head.temp_dir, flush=True)  # temp_dir: no spaces (mkdtemp in /tmp)
time.sleep(600)
"""


def test_next_command_stops_a_head_whose_command_and_watchdog_were_killed(tmp_path):
    from prx_data.app.local_ray import clean_stale_heads

    records = tmp_path / "records"
    env = cli_env(tmp_path)
    owner = subprocess.Popen([sys.executable, "-c", STALE_OWNER, str(records)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        sid_text, watchdog_text, temp = owner.stdout.readline().split()
        sid, watchdog = int(sid_text), int(watchdog_text)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(session_members(sid)) < 2:
            time.sleep(0.2)
        # A live command's head is not touched.
        assert clean_stale_heads(records, log=lambda _m: None) == 0 and session_members(sid)
        os.kill(watchdog, signal.SIGKILL)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    finally:
        if owner.poll() is None:
            owner.kill()
    time.sleep(0.5)
    assert session_members(sid), "nothing left to clean: the test would prove nothing"
    messages: list[str] = []

    assert clean_stale_heads(records, log=messages.append) == 1
    assert session_members(sid) == []
    assert not os.path.exists(temp) and list(records.glob("*.json")) == []
    assert "stopped a local Ray head" in messages[0]
