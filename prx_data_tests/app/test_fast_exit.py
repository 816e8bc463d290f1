"""``prx-data`` leaves without module teardown (``app.fast_exit``), and still does what a normal
exit does outside the process: exit code, output, log files, temporary folders, threads."""

from __future__ import annotations

import subprocess
import sys

from prx_data_tests.app.helpers import cli, cli_env

SCRIPT = r"""
import concurrent.futures, logging, sys, tempfile, threading, time
from prx_data.app.fast_exit import exit_now

folder = tempfile.TemporaryDirectory()
open(folder.name + "/kept-until-exit", "w").write("x")
print(folder.name)
log = logging.getLogger("fast-exit-test")
log.addHandler(logging.FileHandler(sys.argv[1]))
log.warning("written before the exit")
pool = concurrent.futures.ThreadPoolExecutor(2)  # idle workers, never shut down
pool.submit(time.sleep, 0).result()

def late_write():
    time.sleep(0.3)
    with open(sys.argv[2], "w") as f:
        f.write("a non-daemon thread finished")

threading.Thread(target=late_write).start()
sys.stdout.write("unflushed line")  # no newline: still in the buffer when exit_now runs
exit_now(3)
"""


def test_exit_now_keeps_every_effect_of_a_normal_exit(tmp_path):
    log, late = tmp_path / "log.txt", tmp_path / "late.txt"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log), str(late)], capture_output=True, text=True, timeout=60, env=cli_env(tmp_path)
    )
    assert proc.returncode == 3, proc.stderr
    folder, last = proc.stdout.splitlines()
    assert last == "unflushed line"
    assert log.read_text() == "written before the exit\n"
    assert late.read_text() == "a non-daemon thread finished"
    assert not __import__("os").path.exists(folder), "the temporary folder outlived the process"


def test_the_command_exits_with_its_code(tmp_path):
    ok = subprocess.run(cli("buckets"), capture_output=True, text=True, timeout=120, env=cli_env(tmp_path))
    assert ok.returncode == 0 and "tier 512" in ok.stdout
    returned = subprocess.run(cli("lineage"), capture_output=True, text=True, timeout=120, env=cli_env(tmp_path))
    assert returned.returncode == 2 and "give --id" in returned.stderr  # main's own code, flushed
    usage = subprocess.run(cli("no-such-command"), capture_output=True, text=True, timeout=120, env=cli_env(tmp_path))
    assert usage.returncode == 2 and "invalid choice" in usage.stderr  # argparse's SystemExit, the usual way


def test_a_profiled_command_still_writes_its_profile(tmp_path):
    """Under a profiler the command exits the usual way: cProfile writes after it returns."""
    out = tmp_path / "buckets.prof"
    proc = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "prx_data.app.cli", "buckets"],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
