"""Shared fixtures: an isolated data root, a real Dagster instance, and helpers to run
partitions through the real job."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

# The same feature tests on a local root and on an object store (moto S3); the local HTTP server.
pytest_plugins = ["prx_data_tests.storage_parity", "prx_data_tests.http_fixtures"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


class _SerializedShmPrefix(importlib.abc.MetaPathFinder):
    """streaming names a dataset's shared memory by the first free number on the machine, found
    and then created without a lock: two test workers (pytest-xdist) opening datasets at the
    same moment can pick the same number, and one gets FileExistsError. Tests open datasets
    everywhere, so here the choice is serialized across this machine's test processes by a file lock, installed when
    streaming's dataset module is first imported (importing streaming costs seconds: never here).
    Safe in tests only: a torch.distributed job holding the lock across a barrier would hang."""

    def find_spec(self, fullname, path, target=None):
        patch = _SHM_PATCHES.get(fullname)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


@functools.cache
def _shm_lock():
    """One lock object per process (a FileLock is re-entrant per object, not per path)."""
    import filelock

    return filelock.FileLock(os.path.join(tempfile.gettempdir(), "prx-tests-streaming-shm.lock"))


def _serialize_prefix(module) -> None:
    lock = _shm_lock()
    choose = module.get_shm_prefix

    def get_shm_prefix(*args, **kwargs):
        with lock:
            return choose(*args, **kwargs)

    module.get_shm_prefix = get_shm_prefix


def _serialize_cleaning(module) -> None:
    """``clean_stale_shared_memory`` unlinks what it finds stale; two test workers cleaning at
    once race to unlink the same block and the loser gets FileNotFoundError (seen in a full run).
    Same lock as the prefix choice; a block already gone is what cleaning wanted."""
    lock = _shm_lock()
    clean = module.clean_stale_shared_memory

    def clean_stale_shared_memory(*args, **kwargs):
        with lock:
            try:
                return clean(*args, **kwargs)
            except FileNotFoundError:
                return None

    module.clean_stale_shared_memory = clean_stale_shared_memory


_SHM_PATCHES = {"streaming.base.dataset": _serialize_prefix, "streaming.base.util": _serialize_cleaning}
sys.meta_path.insert(0, _SerializedShmPrefix())


def pin_fixture_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixture corpora hold a handful of images per bucket: they pin the publication of before
    issue 22 (any bucket with one unskipped sample, no folding) so the feature each test is about
    is not folded away. The defaults themselves (32, folding on) are tested by
    curation/test_default_reader.py."""
    monkeypatch.setenv("PRX_MIN_STREAM_SAMPLES", "1")
    monkeypatch.setenv("PRX_FOLD_SPARSE_BUCKETS", "0")


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from prx_data.core.settings import get_settings

    root = tmp_path / "data"
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    for name in list(os.environ):
        if name.startswith("PRX_") and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    pin_fixture_publication(monkeypatch)
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
    from prx_data.defs.partitions import SOURCES_PARTITION

    if source not in instance.get_dynamic_partitions(SOURCES_PARTITION):
        instance.add_dynamic_partitions(SOURCES_PARTITION, [source])
    job = defs.resolve_job_def("source_pipeline")
    kwargs = {"asset_selection": selection} if selection else {}
    return job.execute_in_process(instance=instance, partition_key=source, raise_on_error=False, **kwargs)


def materializations(result, asset: str) -> list[Any]:
    # Any: a metadata value's `.value` is a union of every MetadataValue kind, and the tests
    # compare each with the concrete value they expect.
    return [
        e.event_specific_data.materialization
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION" and e.event_specific_data.materialization.asset_key.to_user_string() == asset
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
    import time

    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable))
    if not ray_bin:
        yield None
        return
    temp = tmp_path_factory.mktemp("ray")
    port = _free_port()
    # --block keeps the head in the foreground; its own process group is stopped as a whole at
    # the end, so nothing else's Ray on this machine is touched (unlike `ray stop`).
    from prx_data_tests.cluster.multinode import _node_ports

    # Every port its own free one (the client server's default is 10001): the suite runs in
    # parallel workers (pytest-xdist), each with its own shared head.
    cmd = [
        ray_bin,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
        *_node_ports("--ray-client-server-port"),
    ]
    # Started the way the product starts its own head (core/ray_auth.py): token auth on, with a
    # token of its own passed by path, and the loopback switch, so the head listens on loopback
    # only (prx_data_tests/app/test_local_ray.py lists the suite's own sockets). The test
    # process and every driver it starts get the same variables for the session.
    from prx_data.compat.ray_config import refresh_loaded_ray
    from prx_data.core.ray_auth import head_env, remove_token, write_token

    token_path = write_token()
    auth = head_env(token_path)
    env = {**os.environ, **auth}
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and head.poll() is None and not _listening(port):
        time.sleep(0.5)
    if head.poll() is not None or not _listening(port):
        _stop_group(head)
        remove_token(token_path)
        yield None  # fall back to a Ray per run
        return
    time.sleep(2)  # the raylet registers shortly after the GCS port opens
    saved = {key: os.environ.get(key) for key in auth}
    os.environ.update(auth)
    refresh_loaded_ray()
    os.environ["PRX_RAY_ADDRESS"] = f"127.0.0.1:{port}"
    try:
        yield os.environ["PRX_RAY_ADDRESS"]
    finally:
        os.environ.pop("PRX_RAY_ADDRESS", None)
        _stop_group(head)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        refresh_loaded_ray()
        remove_token(token_path)


def _stop_group(process) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running: kill the whole group
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


def process_corpus_locally(data_root: Path, sources: tuple[str, ...] | None = None) -> dict:
    """Demo corpus through every stage with the plain functions in-process (no Dagster, no Ray):
    a fast fixture for tests of what reads the processed corpus."""
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import get_settings
    from prx_data.curation.exclusion import compute_skips, write_skip_lists
    from prx_data.demo.corpus import build_demo_corpus
    from prx_data.export.corpus_index import merge_all
    from prx_data.imaging.buckets import BucketConfig
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry
    from prx_data.stages.caption_stage import compute_captions
    from prx_data.stages.export_stage import export_source
    from prx_data.stages.label_stage import compute_labels
    from prx_data.stages.phash_stage import compute_phashes

    manifest = build_demo_corpus(data_root)
    settings = get_settings()
    paths = StoragePaths.from_settings(settings)
    registry = load_registry(settings.sources_dir)
    names = [n for n in registry.sources if sources is None or n in sources]
    for name in names:
        uri = paths.raw_table(name)
        ingest_source(registry.get(name), uri)
        compute_phashes(uri, executor="local")
        compute_captions(uri, {"backend": "source"}, executor="local")
        compute_labels(uri, {"backend": "minilm"}, executor="local")
        export_source(uri, name, mds_root=settings.mds_root, exports_uri=paths.exports_table(name), executor="local")
    merge_all(settings.mds_root)
    _, skips = compute_skips(paths, {n: registry.get(n).spec.priority for n in names}, bucket_cfg=BucketConfig())
    write_skip_lists(settings.mds_root, skips)
    return {"manifest": manifest, "paths": paths, "settings": settings, "sources": names}


_OPENED_SHARED_MEMORY: list = []


def _track_streaming_shared_memory() -> None:
    """streaming keeps every SharedMemory it opens alive until interpreter exit (atexit), so a
    long test session runs out of file descriptors. Record them all (module fixtures and Dagster
    asset checks open some too) so each test's teardown can close them."""
    from streaming.base.shared import memory

    original = memory.SharedMemory.__init__
    if getattr(original, "_prx_tracking", False):
        return

    def tracking_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _OPENED_SHARED_MEMORY.append(self)

    tracking_init._prx_tracking = True  # type: ignore[attr-defined]
    memory.SharedMemory.__init__ = tracking_init


_track_streaming_shared_memory()


@pytest.fixture(autouse=True)
def _close_streaming_shared_memory():
    yield
    while _OPENED_SHARED_MEMORY:
        try:
            _OPENED_SHARED_MEMORY.pop().cleanup()
        except Exception:  # noqa: BLE001 - already gone
            pass


# The slowest files (seconds summed over setup, call and teardown with 2 workers, on a 2-core
# machine), started first: scripts/test.sh gives each worker a whole file at a time, and with
# xdist's default order (files with the most tests first) these few-test files came last, so one
# worker ran the vLLM tests alone for minutes at the end. Every vLLM engine of the suite is in one
# file, so one worker runs them one after the other (each starts four actors that import vLLM:
# two engines at once took twice as long each).
SLOW_FILES_FIRST = (
    "models/test_vllm_cpu_engine.py",  # 455-575
    # Each builds a cached venv first (minutes on a cold CI machine, seconds once cached), so
    # they run beside the vLLM file rather than after everything else.
    "test_wheel.py",  # 130-250 warm, single runs under load
    "deploy/test_ray_node_image_env.py",  # 54 warm
    "curation/test_optout_never_shrinks.py",  # 98-117
    "app/test_local_ray.py",  # 95-107
    "automation/test_ui_browser.py",  # 144-237
    "cluster/test_lost_node.py",  # 71-77
    "export/test_mds_writer.py",  # 38-69
    "training/test_loader.py",  # 51-55
    "automation/test_conditions.py",  # 47 (189 before the tick's partition cache)
    "test_lint.py",  # 40
    "app/test_ray_on_demand.py",  # 34
    "cluster/test_multinode_pipeline.py",  # 29-35
    "automation/test_incremental.py",  # 32
    "test_demo_pipeline.py",  # 21-28
)


def pytest_collection_modifyitems(config, items):
    """Longest files first (scripts/test.sh passes --no-loadscope-reorder so xdist keeps this
    order); a file's tests stay together and in their own order."""
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    here = Path(__file__).parent

    def file_rank(item) -> int:
        return rank.get(Path(item.fspath).relative_to(here).as_posix(), len(rank))

    items.sort(key=file_rank)
