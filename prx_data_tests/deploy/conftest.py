"""Real services for the deployment tests: PostgreSQL (scripts/services.sh) and an
S3-compatible server (moto in server mode, with credential checking switched on)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENTS = REPO / "deployments"


# PostgreSQL ---------------------------------------------------------------------------------
SERVICES = ["bash", str(REPO / "scripts" / "services.sh")]


@pytest.fixture(scope="session")
def postgres_admin_url():
    """DSN of the test server that scripts/services.sh starts (installing PostgreSQL if needed).

    A server this session started is stopped at its end; one that was already running (a
    developer's, started by hand) is left as it was.
    """
    was_running = subprocess.run([*SERVICES, "status"], capture_output=True, timeout=60).returncode == 0
    proc = subprocess.run(SERVICES, capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:
        pytest.skip(f"PostgreSQL is not available and cannot be installed here: {proc.stderr.strip()}")
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/services.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PRX_TEST_POSTGRES_URL=")][-1]
    try:
        yield line.split("=", 1)[1]
    finally:
        if not was_running:
            subprocess.run([*SERVICES, "stop"], capture_output=True, timeout=120)


@pytest.fixture
def postgres_url(postgres_admin_url: str):
    """A fresh, empty database per test, as PRX_POSTGRES_URL takes it (SQLAlchemy form, driver
    named); Dagster creates its schema on first use."""
    import psycopg2

    name = f"prx_test_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres_admin_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    base, _ = postgres_admin_url.rsplit("/", 1)
    try:
        yield f"{base}/{name}".replace("postgresql://", "postgresql+psycopg2://", 1)
    finally:
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


# S3 (moto): s3_server and s3_bucket come from the storage-parity plugin -------------------
from prx_data_tests.conftest import pin_fixture_publication  # noqa: E402
from prx_data_tests.storage_parity import S3Server, free_port  # noqa: E402,F401 (re-exported)


@pytest.fixture
def clean_prx_env(monkeypatch: pytest.MonkeyPatch):
    """No PRX_* / AWS_* / DAGSTER_HOME from the caller's shell leaks into a test."""
    from prx_data.core.settings import get_settings

    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_", "S3_ENDPOINT")) or name == "DAGSTER_HOME":
            monkeypatch.delenv(name)
    pin_fixture_publication(monkeypatch)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def shared_ray_head():
    """None of these tests uses Ray (stages run with executor='local'): no session Ray head,
    which costs seconds to start and to stop."""
    yield None
