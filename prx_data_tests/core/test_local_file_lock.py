"""Local lock files are one implementation (filelock's flock): exclusive across processes, the
file and the holder's note kept, and gone with the holder's process."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from prx_data.core.locking import LocalFileLocked, _LocalLock, local_file_lock

HOLD = """
import sys, time
from prx_data.core.locking import local_file_lock
with local_file_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(path):
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    return process


def test_held_by_another_process_then_free_when_it_dies(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    process = _holder(path)
    try:
        started = time.monotonic()
        with pytest.raises(LocalFileLocked, match="busy here"):
            with local_file_lock(str(path), wait_s=0.5, busy="busy here"):
                pass
        assert time.monotonic() - started >= 0.4  # waited, polling, before giving up
    finally:
        process.kill()
        process.wait()
    with local_file_lock(str(path), wait_s=5):  # the kernel released the dead holder's lock
        pass
    assert path.exists()  # kept: a waiter may have it open


def test_a_table_lock_leaves_its_holder_note_for_waiters(tmp_path):
    path = str(tmp_path / "alpha.lock")
    lock = _LocalLock(path, "ingest alpha")
    lock.acquire(wait_s=0)
    try:
        note = json.loads(open(path, "rb").read())
        assert note["purpose"] == "ingest alpha" and note["pid"] > 0
        with pytest.raises(LocalFileLocked):  # a second lock object on the file excludes too
            with local_file_lock(path, wait_s=0):
                pass
    finally:
        lock.release()
    with local_file_lock(path, wait_s=0):
        pass
