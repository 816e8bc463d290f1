"""Run a measured snippet in a fresh interpreter, from a given code tree, and read back its peak
RSS: the memory benchmarks compare two trees (``--old-tree``) on the same data this way.

The child's code starts with :data:`PRELUDE`, which defines ``base`` (RSS after imports, KB) and
``peak_kb()`` (the sampled peak since). It prints one JSON line last; :func:`run_in_tree` returns
it as a dict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PRELUDE = r"""
import threading, time
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
# Sampled, not VmHWM: the kernel updates the high-water mark lazily and missed peaks of 200+ MB
# that a 20 ms sampler saw.
_peak = [0]
def _sample():
    while True:
        _peak[0] = max(_peak[0], _status("VmRSS"))
        time.sleep(0.02)
base = _status("VmRSS")
threading.Thread(target=_sample, daemon=True).start()
def peak_kb():
    time.sleep(0.05)
    return _peak[0]
"""


def run_in_tree(tree: str, code: str, *args: str) -> dict:
    # The arena cap prx-data's CLI sets (core/native_memory.py): glibc's per-thread arenas
    # otherwise keep freed memory and hide what the code holds.
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), MALLOC_ARENA_MAX="2")
    # In the tree: ``python -c`` puts the working folder first on sys.path, ahead of PYTHONPATH,
    # so run from another checkout both "trees" imported that checkout's code.
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=os.path.abspath(tree), check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
