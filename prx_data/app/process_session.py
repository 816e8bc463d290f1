"""The processes of one session (``setsid``), found and stopped as a whole.

The local Ray head is started in a session of its own; Ray's GCS, raylet, agents and workers
inherit it. A process group would do on a quiet system, but a session survives a child that
starts its own group, and it is what ``ps -s`` shows a user. Linux reads ``/proc``; elsewhere
the session leader's process group is used.

Stdlib only: the watchdog (``prx_data.app.ray_watchdog``) imports this in a bare interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

PROC = "/proc"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    return raw.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot): a pid and this pair name one process even
    after the pid is reused."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, ticks: int | None = None) -> bool:
    """Running (a zombie is not) and, when ``ticks`` is given, the same process as then."""
    fields = _stat_fields(pid)
    if fields is None:
        if os.path.isdir(PROC):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] == "Z":
        return False
    return ticks is None or int(fields[19]) == ticks


def session_members(sid: int) -> list[int]:
    """Live processes whose session id is ``sid``."""
    if not os.path.isdir(PROC):
        return [sid] if is_alive(sid) else []
    found = []
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        # fields: state ppid pgrp session ...
        if fields and fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(name))
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_session(sid: int, grace_s: float = 0.1) -> int:
    """SIGTERM to every process of the session, SIGKILL to what is left after ``grace_s``.

    Returns how many processes were signalled. Nothing in a local head is worth waiting for: its
    state lives in its own temp folder, which is deleted next. The grace lets its Python
    processes run their exit handlers; ``ray start --block``, the GCS, the raylet and the
    runtime-env agent ignore SIGTERM (still running 3 s after it, Ray 2.60), so a longer grace
    only delays every command's exit.
    """
    members = session_members(sid)
    if not members:
        return 0
    if not os.path.isdir(PROC):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGTERM)
    _signal_all(members, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not session_members(sid):
            return len(members)
        time.sleep(0.05)
    # Processes forked during the grace (a worker being started) are caught here too.
    for _ in range(3):
        left = session_members(sid)
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        if not os.path.isdir(PROC):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, signal.SIGKILL)
        time.sleep(0.05)
    return len(members)
