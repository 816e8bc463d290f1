"""A cluster deployment with a wrong or missing setting fails when it starts (settings
validation, then the checks the cluster resources run), and the message names the setting."""

from __future__ import annotations

import socket

import pytest

from prx_data.core.settings import load_settings
from prx_data.defs.cluster import ClusterStartupError, RayClusterAddress, check_cluster_startup
from prx_data_tests.deploy.conftest import DEPLOYMENTS, free_port


def cluster_env(s3_server, bucket: str, postgres_url: str = "postgresql+psycopg2://u:p@127.0.0.1:1/db", **extra) -> dict:
    return s3_server.env(
        PRX_ENV="cluster",
        PRX_LANCE_ROOT=f"s3://{bucket}/lance",
        PRX_MDS_ROOT=f"s3://{bucket}/mds",
        PRX_POSTGRES_URL=postgres_url,
        **extra,
    )


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"PRX_ENV": "prod"}, "PRX_ENV"),
        ({"PRX_ENV": "cluster"}, "PRX_LANCE_ROOT"),
        ({"PRX_ENV": "cluster", "PRX_LANCE_ROOT": "s3://b/lance"}, "PRX_MDS_ROOT"),
        ({"PRX_ENV": "cluster", "PRX_LANCE_ROOT": "ftp://b/lance", "PRX_MDS_ROOT": "s3://b/mds"}, "PRX_LANCE_ROOT"),
        ({"PRX_ENV": "cluster", "PRX_LANCE_ROOT": "s3://b/lance", "PRX_MDS_ROOT": "s3://b/mds"}, "PRX_POSTGRES_URL"),
        (
            {"PRX_ENV": "cluster", "PRX_LANCE_ROOT": "s3://b/l", "PRX_MDS_ROOT": "s3://b/m", "PRX_POSTGRES_URL": "mysql://x"},
            "PRX_POSTGRES_URL",
        ),
        ({"PRX_RAY_ADDRESS": "not an address"}, "PRX_RAY_ADDRESS"),
        ({"PRX_CAPTIONER": "{not json"}, "PRX_CAPTIONER"),
    ],
)
def test_settings_name_the_wrong_setting(env, setting):
    with pytest.raises(ValueError, match=setting):
        load_settings({"PRX_DATA_ROOT": "/tmp/prx", **env})


def test_settings_errors_do_not_print_credentials():
    with pytest.raises(ValueError) as info:
        load_settings({"PRX_ENV": "cluster", "AWS_SECRET_ACCESS_KEY": "very-secret-value"})
    assert "very-secret-value" not in str(info.value)


def test_a_good_cluster_passes_every_check(s3_server, s3_bucket, postgres_url):
    with socket.socket() as ray_head:  # something listening where the Ray client port should be
        ray_head.bind(("127.0.0.1", 0))
        ray_head.listen()
        port = ray_head.getsockname()[1]
        settings = load_settings(cluster_env(s3_server, s3_bucket, postgres_url, PRX_RAY_ADDRESS=f"ray://127.0.0.1:{port}"))
        check_cluster_startup(settings, timeout_s=2)


def test_unreachable_database(s3_server, s3_bucket):
    url = f"postgresql+psycopg2://prx:hunter2@127.0.0.1:{free_port()}/prx"
    with pytest.raises(ClusterStartupError, match="PRX_POSTGRES_URL") as info:
        check_cluster_startup(load_settings(cluster_env(s3_server, s3_bucket, url)), timeout_s=2)
    assert "hunter2" not in str(info.value)


def test_wrong_database_password(s3_server, s3_bucket, postgres_url):
    wrong = postgres_url.replace(":prx@", ":wrong@", 1)
    with pytest.raises(ClusterStartupError, match="PRX_POSTGRES_URL.*(password|authentication)"):
        check_cluster_startup(load_settings(cluster_env(s3_server, s3_bucket, wrong)), timeout_s=2)


@pytest.mark.parametrize("bad", ["secret", "key"])
def test_bad_object_store_credentials(s3_server, s3_bucket, postgres_url, bad):
    env = cluster_env(s3_server, s3_bucket, postgres_url)
    env["AWS_SECRET_ACCESS_KEY" if bad == "secret" else "AWS_ACCESS_KEY_ID"] = "wrong"
    with pytest.raises(ClusterStartupError, match="PRX_LANCE_ROOT.*credentials were refused.*AWS_ACCESS_KEY_ID"):
        check_cluster_startup(load_settings(env), timeout_s=2)


def test_object_store_unreachable(s3_server, s3_bucket, postgres_url):
    env = cluster_env(s3_server, s3_bucket, postgres_url, PRX_S3_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ClusterStartupError, match="PRX_LANCE_ROOT.*PRX_S3_ENDPOINT"):
        check_cluster_startup(load_settings(env), timeout_s=2)


def test_unreachable_ray_address(s3_server, s3_bucket, postgres_url):
    env = cluster_env(s3_server, s3_bucket, postgres_url, PRX_RAY_ADDRESS=f"ray://127.0.0.1:{free_port()}")
    with pytest.raises(ClusterStartupError, match="PRX_RAY_ADDRESS=.* is unreachable"):
        check_cluster_startup(load_settings(env), timeout_s=2)


def test_kuberay_mode_needs_a_kubernetes_api(s3_server, s3_bucket, postgres_url, clean_prx_env, tmp_path):
    clean_prx_env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    clean_prx_env.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    # No manifest named: that is said first, naming the setting.
    with pytest.raises(ClusterStartupError, match="PRX_KUBERAY_SPEC is not set"):
        check_cluster_startup(load_settings(cluster_env(s3_server, s3_bucket, postgres_url)), timeout_s=2)
    # The manifest named, as the code-location image does: then the missing Kubernetes API.
    spec = str(DEPLOYMENTS / "k8s" / "raycluster.yaml")
    with pytest.raises(ClusterStartupError, match="PRX_RAY_ADDRESS is not set"):
        check_cluster_startup(load_settings(cluster_env(s3_server, s3_bucket, postgres_url, PRX_KUBERAY_SPEC=spec)), timeout_s=2)


def test_code_location_fails_to_load_with_the_setting_named(s3_server, s3_bucket, postgres_url, clean_prx_env, tmp_path):
    """What a deployment sees: loading prx_data.definitions under PRX_ENV=cluster runs the checks."""
    from prx_data.core.settings import get_settings
    from prx_data.definitions import build_defs

    monkeypatch = clean_prx_env
    env = cluster_env(s3_server, s3_bucket, postgres_url, PRX_DATA_ROOT=str(tmp_path), PRX_RAY_ADDRESS=f"ray://127.0.0.1:{free_port()}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    get_settings.cache_clear()  # importing prx_data.definitions above loaded the local profile
    # The code server resolves the definitions when it starts; that is when the checks run.
    with pytest.raises(Exception) as info:
        build_defs().get_repository_def()
    causes = []
    error: BaseException | None = info.value
    while error is not None:
        causes.append(error)
        error = error.__cause__ or error.__context__
    (startup,) = [e for e in causes if isinstance(e, ClusterStartupError)]
    assert "PRX_LANCE_ROOT" in str(startup) and "credentials were refused" in str(startup)

    # With every setting right, the cluster profile assembles: Ray is the named cluster.
    with socket.socket() as ray_head:
        ray_head.bind(("127.0.0.1", 0))
        ray_head.listen()
        address = f"ray://127.0.0.1:{ray_head.getsockname()[1]}"
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
        monkeypatch.setenv("PRX_RAY_ADDRESS", address)
        get_settings.cache_clear()
        defs = build_defs()
        defs.get_repository_def()
    resources = defs.resources or {}
    ray = resources["ray"]
    assert isinstance(ray, RayClusterAddress) and ray.ray_address == address
    assert resources["storage"].mds_root == f"s3://{s3_bucket}/mds"
