"""Ray on demand: a run joins Ray only when a stage submits Ray work, small work stays in the
run's process, and ``prx-data run`` starts its local head only when a run needs it (real
Dagster, Lance and Ray: the session's shared head, or a head the command starts)."""

from __future__ import annotations

import contextlib
import io
import subprocess

import dagster as dg
import lance
import pytest

from prx_data.app import local_ray
from prx_data.app.cli import main
from prx_data.core import ray_tasks
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.definitions import build_defs
from prx_data.stages.executors import resolve_executor
from prx_data_tests.app.helpers import cli, cli_env, tiny_root
from prx_data_tests.conftest import run_source

RAW, PHASH = dg.AssetKey("raw_samples"), dg.AssetKey("phashes")


def test_auto_runs_small_unpinned_work_here_and_the_rest_on_ray():
    limit = get_settings().local_max_rows
    assert limit == 256
    assert resolve_executor("auto", limit) == "local"
    assert resolve_executor("auto", limit + 1) == "ray"
    # Work pinned to labelled nodes never runs in the driver, however small.
    assert resolve_executor("auto", 1, {"prx_isolated": 0.01}) == "ray"
    assert resolve_executor("auto", 10, local_max_rows=0) == "ray"
    assert resolve_executor("ray", 1) == "ray" and resolve_executor("local", 10**9) == "local"


def test_ensure_ray_starts_then_uses_the_innermost_connector(monkeypatch):
    import ray

    up = {"value": False}
    calls: list[str] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: up["value"])

    def connect(name):
        def run():
            calls.append(name)
            up["value"] = True

        return run

    assert ray_tasks.ensure_ray(required=False) is None
    with pytest.raises(RuntimeError, match="Ray is not initialized"):
        ray_tasks.ensure_ray()
    with ray_tasks.ray_provider("start", lambda: calls.append("start")):
        with ray_tasks.ray_provider("connect", connect("outer")), ray_tasks.ray_provider("connect", connect("inner")):
            assert ray_tasks.ensure_ray() is ray
            assert ray_tasks.ensure_ray() is ray  # joined once
    assert calls == ["start", "inner"]
    assert ray_tasks._PROVIDERS == []


def _connected(instance: dg.DagsterInstance, result) -> bool:
    """dagster-ray logs its connection (a log line of the run, not a Dagster event)."""
    return any("Connected to" in entry.user_message for entry in instance.all_logs(result.run_id))


def _phashes(source: str) -> dict[str, int]:
    ds = lance.dataset(StoragePaths.from_settings(get_settings()).raw_table(source))
    t = ds.to_table(columns=["source_key", "phash"], filter="status = 'ok'")
    return dict(zip(t.column("source_key").to_pylist(), t.column("phash").to_pylist()))


def test_a_small_run_never_joins_ray_and_a_large_one_does(data_root, prx_defs, instance, monkeypatch):
    folder = tiny_root(data_root / "spec", images=3) / "photos"
    for name in ("photos", "again"):
        spec = f"name: {name}\nshape: image_folder\nlocation: {folder}\npriority: 1\nlicense: CC0-1.0\n"
        (data_root / "sources" / f"{name}.yaml").write_text(spec)
    small = run_source(prx_defs, instance, "photos", selection=[RAW, PHASH])
    assert small.success
    assert not _connected(instance, small), "a run of 3 rows joined Ray"
    local = _phashes("photos")
    assert len(local) == 3 and None not in local.values()

    # The same work past the threshold runs as Ray tasks, with the same hashes.
    monkeypatch.setenv("PRX_LOCAL_MAX_ROWS", "0")
    get_settings.cache_clear()
    large = run_source(build_defs(), instance, "again", selection=[RAW, PHASH])
    assert large.success
    assert _connected(instance, large), "work over the threshold did not join Ray"
    assert _phashes("again") == local


def test_the_command_starts_its_head_only_for_a_run_that_needs_ray(tmp_path, monkeypatch):
    # Small work, in this process: the command's head would be a real start.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("PRX_RAY_ADDRESS", raising=False)

    def no_ray(*_a, **_k):
        raise AssertionError("a run of 2 images started Ray")

    monkeypatch.setattr(local_ray, "start_head", no_ray)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", "--root", str(tiny_root(tmp_path / "small"))])
    get_settings.cache_clear()
    assert code == 0, out.getvalue()
    assert "[photos] materializing" in out.getvalue() and "[corpus] materializing" in out.getvalue()

    # Work over the threshold, as a user runs it (a fresh process, so Ray is imported with the
    # head's environment): the head starts when the first stage needs it and every Ray stage
    # joins it, at the address the runs were built with.
    # Two sources: the second run keeps the first one's connection (a new one would be a new
    # Ray job, with new workers to start and import).
    env = {**cli_env(tmp_path), "PRX_LOCAL_MAX_ROWS": "0", "DAGSTER_HOME": str(tmp_path / "home2")}
    large = tiny_root(tmp_path / "large")
    (large / "sources" / "photos_again.yaml").write_text(
        (large / "sources" / "photos.yaml").read_text().replace("name: photos", "name: photos_again")
    )
    proc = subprocess.run(cli("run", "--root", str(large)), env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "[photos] materializing" in log and "[photos_again] materializing" in log, log[-4000:]
    assert log.count("Connected to Ray cluster at 127.0.0.1:") == 1, log[-4000:]

    # Same placements (here: both images too small for any tier) as the run that stayed local.
    def exports(root: str) -> list[dict]:
        table = lance.dataset(str(tmp_path / root / "lance" / "exports" / "photos.lance")).to_table()
        return sorted(table.select(["sample_id", "shard", "drop_reason"]).to_pylist(), key=str)

    assert len(exports("large")) == 2 and exports("large") == exports("small")


def test_a_head_that_cannot_start_fails_every_stage_that_needs_it_saying_why():
    attempts = []

    def broken_start():
        attempts.append(1)
        raise local_ray.LocalRayError("the `ray` command is not installed next to this Python")

    pending = local_ray.PendingRay(None, "127.0.0.1:1", print, start=broken_start)
    pending.prefetch()  # in the background of a stage's work: says nothing yet
    for _ in range(2):  # the second stage gets the same answer at once, not a dial to nowhere
        with pytest.raises(local_ray.LocalRayError, match="not installed.*\n.*PRX_RAY_ADDRESS"):
            pending.wait_or_fail()
    assert attempts == [1]


def test_ingest_gets_ray_starting_once_it_has_written_more_than_the_stages_do_locally(tmp_path):
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    root = tiny_root(tmp_path / "data", images=3)
    source = load_registry(root / "sources").get("photos")
    prefetched: list[int] = []
    with ray_tasks.ray_provider("prefetch", lambda: prefetched.append(1)):
        ingest_source(source, str(tmp_path / "a.lance"), local_max_rows=3)
        assert prefetched == []  # 3 rows: the stages after it stay local
        ingest_source(source, str(tmp_path / "b.lance"), local_max_rows=2)
    assert prefetched, "3 new rows over a threshold of 2 did not get Ray starting"


def test_a_command_whose_work_needs_ray_warms_it_in_the_background(monkeypatch):
    """``warming``: within a command (a held connection), once work ahead needs Ray, before a run
    or during it, the warm-up connects in a thread the run's end waits for; never outside a
    command (each step may be a process of its own there); a failure is left to the stage."""
    import threading
    import time

    connects: list[str] = []
    warmed: list[object] = []
    release = threading.Event()

    def connect(required=True):
        time.sleep(0.2)  # a connection takes time: the run's end must wait for it
        connects.append("connected")
        return "the ray module"

    def warm_up(ray):
        release.wait(10)  # tasks waiting for nodes: the run's end does not wait for them
        warmed.append(ray)

    monkeypatch.setattr(ray_tasks, "ensure_ray", connect)
    with ray_tasks.warming(warm_up):
        ray_tasks.prefetch_ray()
    assert connects == []

    with ray_tasks.connection_held():
        with ray_tasks.warming(warm_up):
            assert connects == []  # nothing ahead needs Ray yet
            ray_tasks.prefetch_ray()  # ingest found more rows than the stages do here
        assert connects == ["connected"] and warmed == []  # connected by the run's end
        release.set()
        with ray_tasks.warming(warm_up):
            pass  # the command's work needs Ray: the next run warms from its start
        assert connects == ["connected"] * 2

        def broken(required=True):
            raise RuntimeError("no head")

        monkeypatch.setattr(ray_tasks, "ensure_ray", broken)
        with ray_tasks.warming(warm_up):
            pass
    monkeypatch.setattr(ray_tasks, "ensure_ray", connect)
    with ray_tasks.connection_held(), ray_tasks.warming(warm_up):
        pass  # a new command starts with nothing ahead
    assert len(connects) == 2
    deadline = time.monotonic() + 10
    while len(warmed) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warmed == ["the ray module"] * 2
