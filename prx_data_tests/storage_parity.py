"""Parity by construction: the same feature test on a local folder and on an object store.

A pytest plugin (registered in ``prx_data_tests/conftest.py``). ``storage_root`` is parametrized
over ``local`` (a temporary folder) and ``s3`` (moto's S3 server on a free port of 127.0.0.1,
checking credentials, reached through a non-default endpoint with the same ``storage_options``
settings.py builds), so a test written once runs on both. ``storage_roots`` gives both at once,
module-scoped, for tests that build a corpus on each and compare what they read back.
"""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

KINDS = ("local", "s3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def env(self, **extra: str) -> dict[str, str]:
        """The variables prx_data.core.settings reads for object storage."""
        return {
            "PRX_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            **extra,
        }

    def options(self) -> dict[str, str]:
        from prx_data.core.storage import storage_options_from_env

        return storage_options_from_env(self.env())

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def new_bucket(self) -> str:
        name = f"prx-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


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
    return s3_server.new_bucket()


@dataclass(frozen=True)
class StorageRoot:
    """One root to run a feature on: ``uri(...)`` names a place under it, ``options`` reach it."""

    kind: str
    base: str  # a folder path or 's3://<bucket>'
    options: dict | None
    server: S3Server | None = None

    def uri(self, *parts: str) -> str:
        from prx_data.core.storage import join

        return join(self.base, *parts)

    def put(self, *parts: str, data: bytes) -> str:
        """Write ``data`` at ``uri(*parts)`` (a file, or one object) and return that place."""
        from prx_data.core.storage import locate, write_bytes

        place = self.uri(*parts)
        write_bytes(locate(place, self.options), data)
        return place

    def files(self, *parts: str) -> dict[str, bytes]:
        """Every file under ``uri(*parts)`` by its '/'-separated relative path, with its bytes."""
        from prx_data.core.storage import glob_files, locate, read_bytes

        loc = locate(self.uri(*parts), self.options)
        return {rel: read_bytes(loc.child(rel)) for rel in glob_files(loc, "*", recursive=True)}

    def streaming_env(self) -> dict[str, str]:
        """What a streaming reader of this root needs in its environment (nothing when local)."""
        from prx_data.core.storage import streaming_env

        return streaming_env(self.options) if self.server else {}


def make_root(kind: str, folder: Path, server: S3Server | None) -> StorageRoot:
    if kind == "local":
        folder.mkdir(parents=True, exist_ok=True)
        return StorageRoot("local", str(folder), None)
    assert server is not None, "an s3 root needs the moto server"
    return StorageRoot("s3", f"s3://{server.new_bucket()}", server.options(), server)


@pytest.fixture(params=KINDS)
def storage_root(request, tmp_path: Path) -> StorageRoot:
    """A fresh root per test, once local and once on moto S3."""
    server = request.getfixturevalue("s3_server") if request.param == "s3" else None
    return make_root(request.param, tmp_path / "root", server)


@pytest.fixture(scope="module")
def storage_roots(s3_server: S3Server, tmp_path_factory) -> dict[str, StorageRoot]:
    """Both kinds at once, fresh per module: {"local": ..., "s3": ...}."""
    return {kind: make_root(kind, tmp_path_factory.mktemp(f"parity-{kind}"), s3_server) for kind in KINDS}
