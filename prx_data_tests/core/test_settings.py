"""PRX_* variables are typed: a bad value is refused naming the variable and the value."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from prx_data.core.settings import Settings, env_name, get_settings, load_settings

BASE = {"PRX_DATA_ROOT": "/tmp/prx-settings"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PRX_MIN_STREAM_SAMPLES": "4k"}, "PRX_MIN_STREAM_SAMPLES: '4k' is not an integer"),
        ({"PRX_ROWS_PER_FRAGMENT": "1e6x"}, "PRX_ROWS_PER_FRAGMENT: '1e6x' is not an integer"),
        ({"PRX_FOLD_MAX_STEPS": "2.5"}, "PRX_FOLD_MAX_STEPS: '2.5' is not an integer"),
        ({"PRX_LOCK_WAIT_S": "soon"}, "PRX_LOCK_WAIT_S: 'soon' is not a number"),
        ({"PRX_FOLD_SPARSE_BUCKETS": "maybe"}, "PRX_FOLD_SPARSE_BUCKETS: 'maybe' is not a yes/no flag"),
        ({"PRX_STARTUP_CHECKS": "sometimes"}, "PRX_STARTUP_CHECKS: 'sometimes' is not a yes/no flag"),
        ({"PRX_ENV": "prod"}, "PRX_ENV: 'prod' is not 'local' or 'cluster'"),
        ({"PRX_DEDUP_RADIUS": "40"}, "PRX_DEDUP_RADIUS: '40' should be less than or equal to 32"),
        ({"PRX_MIN_STREAM_SAMPLES": "0"}, "PRX_MIN_STREAM_SAMPLES: '0' should be greater than or equal to 1"),
        ({"PRX_CAPTIONER": "[1]"}, "PRX_CAPTIONER: '[1]' is not a JSON object"),
        ({"PRX_CLASSIFIER": "{not json"}, "PRX_CLASSIFIER must be a JSON object"),
        # Mistyped roots: before, the first was a folder named "s3:" and the second failed only
        # in the export step, after ingest, hashing and labelling had run.
        ({"PRX_MDS_ROOT": "s3:/bucket/mds"}, "PRX_MDS_ROOT: 's3:/bucket/mds' looks like an object-store URI that lost a slash"),
        ({"PRX_LANCE_ROOT": "s5://bucket/lance"}, "PRX_LANCE_ROOT: unsupported object-store scheme 's5'"),
        ({"PRX_DATA_ROOT": "gs:"}, "PRX_DATA_ROOT: 'gs:' looks like an object-store URI"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_value(env, expected):
    with pytest.raises(ValueError) as info:
        load_settings({**BASE, **env})
    assert expected in str(info.value)
    assert "invalid literal" not in str(info.value)  # the old int() message said neither


def test_every_bad_variable_is_reported_at_once():
    with pytest.raises(ValueError) as info:
        load_settings({**BASE, "PRX_MIN_STREAM_SAMPLES": "4k", "PRX_LOCK_TTL_S": "1m"})
    assert "PRX_MIN_STREAM_SAMPLES: '4k'" in str(info.value) and "PRX_LOCK_TTL_S: '1m'" in str(info.value)


def test_a_secret_value_is_never_echoed():
    with pytest.raises(ValueError) as info:
        load_settings(
            {
                **BASE,
                "PRX_ENV": "cluster",
                "PRX_LANCE_ROOT": "s3://b/l",
                "PRX_MDS_ROOT": "s3://b/m",
                "PRX_POSTGRES_URL": "mysql://user:hunter2@db/x",
            }
        )
    assert "PRX_POSTGRES_URL" in str(info.value) and "hunter2" not in str(info.value)


def test_defaults_and_typed_values():
    settings = load_settings(BASE)
    assert (settings.min_stream_samples, settings.fold_sparse_buckets, settings.fold_max_steps) == (32, True, 2)
    assert (settings.rows_per_fragment, settings.lock_wait_s, settings.lock_ttl_s, settings.dedup_radius) == (1_000_000, 1800.0, 60.0, 2)
    assert settings.startup_checks is True and settings.ray_address is None and settings.storage_options == {}
    assert settings.captioner == {"backend": "source"} and settings.classifier == {"backend": "minilm"}
    assert (settings.lance_root, settings.mds_root) == ("/tmp/prx-settings/lance", "/tmp/prx-settings/mds")
    assert (settings.sources_dir, settings.optout_dir) == ("/tmp/prx-settings/sources", "/tmp/prx-settings/optout")

    typed = load_settings(
        {
            **BASE,
            "PRX_MIN_STREAM_SAMPLES": "64",
            "PRX_FOLD_SPARSE_BUCKETS": "off",
            "PRX_STARTUP_CHECKS": "off",
            "PRX_LOCK_WAIT_S": "2.5",
            "PRX_CAPTIONER": '{"backend": "vllm", "model": "m"}',
        }
    )
    assert (typed.min_stream_samples, typed.fold_sparse_buckets, typed.startup_checks, typed.lock_wait_s) == (64, False, False, 2.5)
    assert typed.captioner == {"backend": "vllm", "model": "m"} and typed.lock_policy().wait_s == 2.5
    # An empty variable is the default, as before (`PRX_MIN_STREAM_SAMPLES= prx-data ...`).
    assert load_settings({**BASE, "PRX_MIN_STREAM_SAMPLES": ""}).min_stream_samples == 32


def test_object_store_roots_and_credentials():
    settings = load_settings(
        {
            "PRX_DATA_ROOT": "s3://bucket/prx",
            "PRX_S3_ENDPOINT": "http://127.0.0.1:9000",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
        }
    )
    assert (settings.lance_root, settings.mds_root) == ("s3://bucket/prx/lance", "s3://bucket/prx/mds")
    assert settings.storage_options == {
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "allow_http": "true",
    }
    assert not settings.sources_dir.startswith("s3://")  # spec and request folders stay local


def test_a_given_mapping_is_the_only_source(monkeypatch):
    monkeypatch.setenv("PRX_MIN_STREAM_SAMPLES", "4k")
    assert load_settings(BASE).min_stream_samples == 32  # os.environ not read when a mapping is given
    monkeypatch.setenv("PRX_MIN_STREAM_SAMPLES", "8")
    monkeypatch.setenv("PRX_DATA_ROOT", "/tmp/prx-settings-env")
    get_settings.cache_clear()
    try:
        assert get_settings().min_stream_samples == 8 and get_settings() is get_settings()
    finally:
        get_settings.cache_clear()


def test_every_field_has_its_variable():
    assert env_name("min_stream_samples") == "PRX_MIN_STREAM_SAMPLES"
    # Settings still builds from keyword arguments (tests and the explorer construct it directly).
    direct = Settings(data_root="/d", sources_dir="/s", optout_dir="/o", lance_root="/l", mds_root="/m")
    assert direct.lance_root == "/l" and direct.min_stream_samples == 32


def test_every_sensor_ticks_at_the_configured_interval(tmp_path):
    """PRX_SENSOR_INTERVAL_S reaches the three sensors of the code location (read when it loads)."""
    code = "from prx_data.definitions import defs; print(sorted((s.name, s.minimum_interval_seconds) for s in defs.sensors))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRX_")}
    env.update(PRX_DATA_ROOT=str(tmp_path), PRX_SENSOR_INTERVAL_S="7")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([("optout_folder_sensor", 7), ("prx_automation", 7), ("source_registry_sensor", 7)])


def test_the_cli_names_a_bad_variable_without_a_traceback(tmp_path):
    env = {**os.environ, "PRX_DATA_ROOT": str(tmp_path), "PRX_MDS_ROOT": "s3:/bucket/mds", "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "prx_data.app.cli", "run"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: invalid settings: PRX_MDS_ROOT:") and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "s3:").exists()
