"""Real services for the deployment tests: PostgreSQL (scripts/services.sh) and an
S3-compatible server (moto in server mode, with credential checking switched on)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENTS = REPO / "deployments"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


# S3 (moto) ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def env(self, **extra: str) -> dict[str, str]:
        """The variables prx_data.settings reads for object storage."""
        return {
            "PRX_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            **extra,
        }

    def options(self) -> dict[str, str]:
        from prx_data.settings import _storage_options_from_env

        return _storage_options_from_env(self.env())

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 on a free port of 127.0.0.1, refusing unknown keys and wrong secrets.

    moto accepts any credentials unless told otherwise; the first requests (creating an IAM
    user with a policy and a key) run unauthenticated, then ``/moto-api/reset-auth`` turns
    checking on, so a bad key or secret gets the 403 a real store would send.
    """
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boot = dict(endpoint_url=endpoint, aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap", region_name="us-east-1")
        iam = boto3.client("iam", **boot)
        iam.create_user(UserName="prx")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="prx", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="prx")["AccessKey"]
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        urllib.request.urlopen(request, timeout=10).read()
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    name = f"prx-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def clean_prx_env(monkeypatch: pytest.MonkeyPatch):
    """No PRX_* / AWS_* / DAGSTER_HOME from the caller's shell leaks into a test."""
    from prx_data.settings import get_settings

    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_", "S3_ENDPOINT")) or name == "DAGSTER_HOME":
            monkeypatch.delenv(name)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def shared_ray_head():
    """None of these tests uses Ray (stages run with executor='local'): no session Ray head,
    which costs seconds to start and to stop."""
    yield None
