"""One writer per source table, on a local root and on s3:// (moto): a second process waits or
refuses naming the holder, a killed holder does not block for ever, a live holder's lease is
renewed, and two pipelines started at once leave one healthy table without duplicate ids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lance
import pyarrow.compute as pc
import pytest

from prx_data.core.locking import TableLocked, table_lock
from prx_data_tests import images

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, clean_prx_env):
    """(lance root, mds root, storage options, env for a worker process) on either store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "AWS_"))}
    env["PYTHONPATH"] = str(REPO)
    if request.param == "local":
        lance_root, mds_root, options = str(tmp_path / "lance"), str(tmp_path / "mds"), {}
    else:
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        lance_root, mds_root, options = f"s3://{bucket}/lance", f"s3://{bucket}/mds", server.options()
        env.update(server.env())
    env.update(PRX_DATA_ROOT=str(tmp_path / "data"), PRX_LANCE_ROOT=lance_root, PRX_MDS_ROOT=mds_root)
    return lance_root, mds_root, options, env


def _worker(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "prx_data_tests.deploy.lock_worker", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _held(worker: subprocess.Popen) -> None:
    assert worker.stdout is not None and worker.stderr is not None
    line = worker.stdout.readline().strip()
    if line != "held":
        worker.kill()
        raise AssertionError(f"holder did not start: {line!r} {worker.stderr.read()[-2000:]}")


def test_second_writer_waits_or_refuses_naming_the_holder(store):
    lance_root, _, options, env = store
    uri = f"{lance_root}/sources/alpha.lance"
    holder = _worker("hold", uri, env=env)
    try:
        _held(holder)
        with pytest.raises(TableLocked, match=rf"held by lock_worker hold \(host .*pid {holder.pid}"):
            with table_lock(uri, options, wait_s=0.5, ttl_s=30):
                pass
        waiter = _worker("try", uri, "120", env=env)
        assert holder.stdin is not None
        holder.stdin.close()  # the holder finishes; the waiter gets the lock
        assert holder.wait(timeout=60) == 0
        out, err = waiter.communicate(timeout=120)
        assert out.strip() == "got", err[-2000:]
    finally:
        holder.kill()
    # Re-entrant in one thread: a locked stage may call another locked function.
    with table_lock(uri, options, wait_s=5, ttl_s=30):
        with table_lock(uri, options, wait_s=0.1, ttl_s=30):
            pass


def test_a_killed_holder_does_not_block_the_next_run(store):
    lance_root, _, options, env = store
    uri = f"{lance_root}/sources/alpha.lance"
    holder = _worker("hold", uri, env={**env, "PRX_LOCK_TTL_S": "2"})
    _held(holder)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    started = time.monotonic()
    with table_lock(uri, options, wait_s=30, ttl_s=30):
        pass
    # Local: the kernel drops a dead process's flock at once; s3: the lease expires after its ttl.
    assert time.monotonic() - started < 15


def test_a_live_lease_is_renewed_not_taken_over(s3_server, s3_bucket, clean_prx_env):
    uri = f"s3://{s3_bucket}/lance/sources/alpha.lance"
    options = s3_server.options()
    with table_lock(uri, options, wait_s=1, ttl_s=2):
        # Without renewal the lease would expire after 2 s and this contender would take it.
        with pytest.raises(TableLocked):
            from prx_data.core import locking

            # A second owner in this process: bypass the per-process re-entrancy.
            lease = locking._S3Lease(locking.lock_uri(uri), options, "contender", 2)
            lease.acquire(4.0)
    with table_lock(uri, options, wait_s=1, ttl_s=2):
        pass  # released: free again at once


def _photo_source(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(n):
        (folder / f"p{i}.jpg").write_bytes(images.jpeg(640 + 8 * i, 480, seed=i))
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "alpha.yaml").write_text(f"name: alpha\nshape: image_folder\nlocation: {folder}\n")
    return specs


def test_two_pipelines_at_once_leave_one_healthy_table(store, tmp_path):
    lance_root, mds_root, options, env = store
    specs = _photo_source(tmp_path, 6)
    workers = [_worker("pipeline", str(specs), env=env) for _ in range(2)]
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0 and out.strip().endswith("done"), err[-3000:]
    table = lance.dataset(f"{lance_root}/sources/alpha.lance", storage_options=options or None).to_table(columns=["sample_id", "status"])
    assert table.num_rows == 6 and pc.count_distinct(table["sample_id"]).as_py() == 6
    exports = lance.dataset(f"{lance_root}/exports/alpha.lance", storage_options=options or None).to_table()
    placed = exports.filter(pc.is_valid(exports["shard"]))
    assert placed.num_rows == 6 and pc.count_distinct(placed["sample_id"]).as_py() == 6
    if "://" not in mds_root:
        from prx_data_tests.export.rawtables import visible_samples

        assert len(visible_samples(mds_root)) == 6


def test_runs_starting_at_once_on_a_new_root_share_its_dagster_setup(tmp_path, clean_prx_env):
    """What `prx-data run --root NEW` does before its first run, in four processes at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "AWS_")) and k != "DAGSTER_HOME"}
    env.update(PYTHONPATH=str(REPO), DAGSTER_DISABLE_TELEMETRY="1")
    code = (
        "import sys; from pathlib import Path; from prx_data.app.cli import _use_data_root; from prx_data.defs.orchestrate import open_instance\n"
        "_use_data_root(Path(sys.argv[1]))\n"
        "with open_instance(['alpha', 'beta']) as instance:\n"
        "    print(sorted(instance.get_dynamic_partitions('sources')), len(instance.get_runs()))\n"
    )
    root = tmp_path / "new-root"  # a folder of specs, no Dagster home yet
    (root / "sources").mkdir(parents=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(root)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert out.strip() == "['alpha', 'beta'] 0"


def test_the_storage_resource_sets_the_lock_timings_of_its_run(store):
    """Plain modules take no settings: the code location's StorageResource hands the run its lock
    timings, and a second writer then gives up after the configured wait."""
    import dagster as dg

    from prx_data.core import locking
    from prx_data.defs.resources import StorageResource

    lance_root, mds_root, options, env = store
    uri = f"{lance_root}/sources/alpha.lance"
    holder = _worker("hold", uri, env=env)
    _held(holder)
    resource = StorageResource(lance_root=lance_root, mds_root=mds_root, storage_options=options or {}, lock_wait_s=0.5, lock_ttl_s=30)
    try:
        with dg.build_resources({"storage": resource}):
            started = time.monotonic()
            with pytest.raises(TableLocked, match="alpha"):
                with table_lock(uri, options):  # no wait given: the resource's 0.5 s
                    pass
            assert time.monotonic() - started < 10
    finally:
        locking.configure(locking.LockPolicy())
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
