"""The pipeline on an s3:// root (moto, checking credentials) leaves no object-store secret in
Dagster's storage (SQLite files under DAGSTER_HOME, or PostgreSQL), nor on stdout/stderr."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from prx_data_tests import images
from prx_data_tests.automation.conftest import CORPUS, PER_SOURCE, local_stages
from prx_data_tests.security.scan import scan_folder, scan_postgres

DOCKER_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "deployments" / "docker" / "dagster.yaml"


def _small_source(data_root: Path) -> None:
    folder = data_root / "inputs" / "tiny"
    folder.mkdir(parents=True)
    for i in range(4):
        (folder / f"img{i}.jpg").write_bytes(images.jpeg(512, 384, seed=40 + i))
        (folder / f"img{i}.txt").write_text(f"A soft colour field, picture {i}.")
    (folder / "broken.jpg").write_bytes(b"not an image")
    (data_root / "sources" / "tiny.yaml").write_text(f"name: tiny\nshape: image_folder\nlocation: {folder}\nlicense: cc0\n")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_pipeline_stores_no_secret(backend, data_root: Path, tmp_path: Path, s3_server, monkeypatch, capfd, request):
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "DAGSTER_HOME":
            monkeypatch.delenv(name)
    bucket = s3_server.new_bucket()
    for name, value in s3_server.env(PRX_LANCE_ROOT=f"s3://{bucket}/lance", PRX_MDS_ROOT=f"s3://{bucket}/mds").items():
        monkeypatch.setenv(name, value)
    from prx_data.core.settings import get_settings

    get_settings.cache_clear()
    _small_source(data_root)
    secrets = [s3_server.secret_key.encode(), s3_server.access_key.encode()]

    home = tmp_path / "dagster_home"
    home.mkdir()
    if backend == "postgres":
        dsn = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("PRX_POSTGRES_URL", dsn)
        shutil.copy(DOCKER_DAGSTER_YAML, home / "dagster.yaml")
        make_instance: Callable[[], Any] = lambda: dg.DagsterInstance.from_config(str(home))  # noqa: E731
    else:
        make_instance = lambda: dg.instance_for_test(temp_dir=str(home))  # noqa: E731

    from prx_data.definitions import build_defs
    from prx_data.defs.partitions import SOURCES_PARTITION

    defs = build_defs()
    with make_instance() as instance:
        instance.add_dynamic_partitions(SOURCES_PARTITION, ["tiny"])
        for job, partition, assets in (("source_pipeline", "tiny", PER_SOURCE), ("corpus", None, CORPUS)):
            keys = sorted(dg.AssetKey(a) for a in assets)
            result = defs.resolve_job_def(job).execute_in_process(
                instance=instance, partition_key=partition, asset_selection=keys, run_config=local_stages(keys), raise_on_error=False
            )
            assert result.success, [e.message for e in result.all_events if e.is_failure]
        # The data really went to the bucket, through the credentials.
        listed = s3_server.client().list_objects_v2(Bucket=bucket, Prefix="lance/")
        assert listed.get("KeyCount", 0) > 0

    leaks = scan_folder(home, secrets)
    if backend == "postgres":
        from prx_data.defs.cluster import libpq_url

        leaks += scan_postgres(libpq_url(dsn), secrets)
    captured = capfd.readouterr()
    leaks += [
        f"{where}: {s!r}" for where, text in (("stdout", captured.out), ("stderr", captured.err)) for s in secrets if s.decode() in text
    ]
    assert not leaks, "\n".join(leaks[:20])
