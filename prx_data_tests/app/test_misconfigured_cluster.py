"""A misconfigured cluster fails ``prx-data run`` in seconds, once, with the cause and the setting
to fix on one summary line, and the corpus-wide assets do not run after every source failed.

A real token-protected head on loopback (``app.local_ray.start_head``, the product's own) and
real ``prx-data run`` subprocesses pointed at it the way a deployment points a driver at a
cluster (``PRX_RAY_ADDRESS``, ``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN_PATH``), each with one mistake:
a token that is not the cluster's, an address where no Ray listens, a task-resource label no
node offers. ``PRX_LOCAL_MAX_ROWS=0`` puts every stage on Ray, as a large source would.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from prx_data.app.local_ray import free_port, start_head
from prx_data.core.ray_auth import remove_token, write_token
from prx_data_tests.app.helpers import cli, cli_env, tiny_root

# A hang detector, not the speed figure: before, a wrong token ran past 600 s. The whole
# command (CLI start, Dagster, ingest of two images) takes most of this on a busy 2-core
# machine; the Ray failure itself is under a second for the token, the waits below for the
# others. The figures are printed.
LIMIT_S = 150


@pytest.fixture(scope="module")
def head():
    started = start_head(num_cpus=1)
    started.wait_ready()
    try:
        yield started
    finally:
        started.stop()


def _run(tmp_path: Path, env_update: dict[str, str]) -> tuple[int, str, float]:
    root = tiny_root(tmp_path / "data")
    env = {**cli_env(tmp_path), "PRX_LOCAL_MAX_ROWS": "0", **env_update}
    started = time.monotonic()
    done = subprocess.run(cli("run", "--root", str(root)), env=env, capture_output=True, text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started
    return done.returncode, done.stdout + done.stderr, elapsed


def _summary(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[photos] FAILED in ")]


def _check(out: str, code: int, elapsed: float, *, cause: str, setting: str) -> None:
    lines = _summary(out)
    assert code == 1, out[-3000:]
    assert lines, out[-3000:]
    assert all(cause in line and setting in line and "not retried" in line for line in lines), lines
    assert "Exceeded max_retries" not in out
    assert "[corpus] skipped: every source run failed" in out
    assert "[corpus] materializing" not in out
    assert elapsed < LIMIT_S, f"took {elapsed:.1f}s"


def test_a_wrong_token_fails_at_once_naming_the_token_settings(head, tmp_path):
    wrong = write_token()
    try:
        env = {**head.env, "PRX_RAY_ADDRESS": head.address, "RAY_AUTH_TOKEN_PATH": wrong}
        code, out, elapsed = _run(tmp_path, env)
    finally:
        remove_token(wrong)
    print(f"wrong token: prx-data run ended in {elapsed:.1f}s; {_summary(out)}")
    _check(out, code, elapsed, cause="refused the driver's token (InvalidAuthToken", setting="RAY_AUTH_TOKEN_PATH")


def test_an_address_where_no_ray_listens_fails_after_the_bounded_wait(head, tmp_path):
    env = {**head.env, "PRX_RAY_ADDRESS": f"127.0.0.1:{free_port()}", "PRX_RAY_CONNECT_WAIT_S": "2"}
    code, out, elapsed = _run(tmp_path, env)
    print(f"wrong address: prx-data run ended in {elapsed:.1f}s; {_summary(out)}")
    _check(out, code, elapsed, cause="nothing answers as a Ray cluster at 127.0.0.1:", setting="PRX_RAY_ADDRESS")


def test_a_resource_label_no_node_offers_fails_after_the_bounded_wait(head, tmp_path):
    env = {
        **head.env,
        "PRX_RAY_ADDRESS": head.address,
        "PRX_RAY_TASK_RESOURCES": '{"prx_no_such_pool": 0.01}',
        "PRX_RAY_RESOURCE_WAIT_S": "2",
    }
    code, out, elapsed = _run(tmp_path, env)
    print(f"unsatisfiable label: prx-data run ended in {elapsed:.1f}s; {_summary(out)}")
    _check(
        out, code, elapsed, cause='no live Ray node offers the task resources {"prx_no_such_pool": 0.01}', setting="PRX_RAY_TASK_RESOURCES"
    )
    assert os.environ.get("PRX_RAY_TASK_RESOURCES") is None  # nothing leaked into the test process
