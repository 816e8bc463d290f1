"""One mapping of object-store credentials: the same storage_options reach the same store through
every client the package builds (pyarrow for files, boto3 for the table lease and streaming's
shard downloads, streaming's environment)."""

from __future__ import annotations

import pytest

from prx_data.compat.streaming_internals import ConfiguredS3Downloader
from prx_data.core import locking
from prx_data.core.storage import (
    ObjectStoreError,
    check_access,
    locate,
    read_bytes,
    s3_credentials,
    storage_options_from_env,
    streaming_env,
    write_bytes,
)


def test_options_from_the_environment_and_back():
    env = {"PRX_S3_ENDPOINT": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"}
    options = storage_options_from_env(env)
    assert options == {
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "aws_region": "eu-west-1",
        "allow_http": "true",
    }
    assert streaming_env(options) == {
        "S3_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert s3_credentials(options).boto3_kwargs() == {
        "endpoint_url": "http://127.0.0.1:9000",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "region_name": "eu-west-1",
    }
    assert storage_options_from_env({}) == {} and s3_credentials({}).boto3_kwargs() == {}


@pytest.mark.parametrize(
    ("options", "endpoint"),
    [
        ({"aws_endpoint": "minio:9000"}, "https://minio:9000"),  # no scheme: TLS unless told otherwise
        ({"aws_endpoint": "minio:9000", "allow_http": "true"}, "http://minio:9000"),
        ({"endpoint": "https://storage.example"}, "https://storage.example"),  # Lance's other spelling
    ],
)
def test_an_endpoint_means_the_same_to_every_client(options, endpoint):
    assert s3_credentials(options).endpoint_url == endpoint
    assert s3_credentials(options).boto3_kwargs()["endpoint_url"] == endpoint


def test_every_client_reaches_the_store_with_the_same_options(s3_server, s3_bucket, tmp_path):
    # A scheme-less endpoint with allow_http: each client must read both the same way.
    options = {**s3_server.options(), "aws_endpoint": s3_server.endpoint.removeprefix("http://"), "allow_http": "true"}
    uri = f"s3://{s3_bucket}/creds/blob.bin"
    write_bytes(locate(uri, options), b"payload")  # pyarrow
    assert read_bytes(locate(uri, options)) == b"payload"
    lease_client = locking._s3_client(options)  # boto3, the table lease
    assert lease_client.get_object(Bucket=s3_bucket, Key="creds/blob.bin")["Body"].read() == b"payload"
    downloader = ConfiguredS3Downloader(options)  # boto3, streaming's shard downloads
    downloader.download(uri, str(tmp_path / "blob.bin"), timeout=30)
    assert (tmp_path / "blob.bin").read_bytes() == b"payload"


def test_a_wrong_secret_is_refused_by_every_client(s3_server, s3_bucket):
    options = {**s3_server.options(), "aws_secret_access_key": "wrong"}
    with pytest.raises(ObjectStoreError, match="credentials were refused"):
        check_access(f"s3://{s3_bucket}", options, "PRX_MDS_ROOT")
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError):
        locking._s3_client(options).list_objects_v2(Bucket=s3_bucket)


def test_temporary_credentials_reach_every_client():
    options = storage_options_from_env({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"})
    assert options["aws_session_token"] == "t"
    assert s3_credentials(options).boto3_kwargs()["aws_session_token"] == "t"
