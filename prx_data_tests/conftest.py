"""Shared fixtures: an isolated data root, a real Dagster instance, and helpers to run
partitions through the real job."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from prx_data.settings import get_settings

    root = tmp_path / "data"
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    for name in list(os.environ):
        if name.startswith("PRX_") and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    get_settings.cache_clear()
    yield root
    get_settings.cache_clear()


@pytest.fixture
def prx_defs(data_root: Path) -> dg.Definitions:
    from prx_data.definitions import build_defs

    return build_defs()


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def run_source(defs: dg.Definitions, instance: dg.DagsterInstance, source: str, selection=None):
    """Materialize one source partition through the real per-source job."""
    from prx_data.defs.partitions import sources_partitions

    if source not in instance.get_dynamic_partitions(sources_partitions.name):
        instance.add_dynamic_partitions(sources_partitions.name, [source])
    job = defs.resolve_job_def("source_pipeline")
    kwargs = {"asset_selection": selection} if selection else {}
    return job.execute_in_process(instance=instance, partition_key=source, raise_on_error=False, **kwargs)


def materializations(result, asset: str) -> list[dg.AssetMaterialization]:
    return [
        e.event_specific_data.materialization
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
        and e.event_specific_data.materialization.asset_key.to_user_string() == asset
    ]


@pytest.fixture(scope="session", autouse=True)
def shared_ray_head(tmp_path_factory):
    """One Ray head for the whole session: every Dagster run connects to it (PRX_RAY_ADDRESS)
    instead of starting and stopping its own Ray, which costs seconds per run on 2 cores."""
    import shutil
    import subprocess
    import sys

    if os.environ.get("PRX_RAY_ADDRESS") or os.environ.get("PRX_TEST_NO_SHARED_RAY"):
        yield None
        return
    import signal
    import time

    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable))
    if not ray_bin:
        yield None
        return
    temp = tmp_path_factory.mktemp("ray")
    port = _free_port()
    # --block keeps the head in the foreground; its own process group is stopped as a whole at
    # the end, so nothing else's Ray on this machine is touched (unlike `ray stop`).
    cmd = [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={temp}"]
    # `ray start` turns token auth on by default; this head listens on loopback for tests only.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and head.poll() is None and not _listening(port):
        time.sleep(0.5)
    if head.poll() is not None or not _listening(port):
        _stop_group(head)
        yield None  # fall back to a Ray per run
        return
    time.sleep(2)  # the raylet registers shortly after the GCS port opens
    os.environ["PRX_RAY_ADDRESS"] = f"127.0.0.1:{port}"
    try:
        yield os.environ["PRX_RAY_ADDRESS"]
    finally:
        os.environ.pop("PRX_RAY_ADDRESS", None)
        _stop_group(head)


def _stop_group(process) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, TimeoutError, Exception):  # noqa: BLE001
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
