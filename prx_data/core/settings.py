"""The one place where the environment is chosen.

``PRX_ENV`` picks a profile (``local`` by default, ``cluster`` for PostgreSQL/KubeRay/object
storage); every other setting is an override of that profile read from ``PRX_*`` variables.
Nothing else in the package reads the environment for configuration.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from prx_data.core.storage import is_remote
from prx_data.core.locking import LockPolicy

EnvName = Literal["local", "cluster"]


class Settings(BaseModel):
    # Validation errors would otherwise print the inputs, credentials included.
    model_config = ConfigDict(hide_input_in_errors=True)

    env: EnvName = "local"
    data_root: str = Field(description="Root of all data (a folder or an s3:// / gs:// URI).")
    sources_dir: str = Field(description="Folder holding one YAML spec per source.")
    optout_dir: str = Field(description="Folder holding opt-out requests (YAML/JSON).")
    lance_root: str
    mds_root: str
    # Credentials and endpoint for object storage, passed to Lance and MDS as-is.
    storage_options: dict[str, str] = Field(default_factory=dict)
    ray_address: str | None = None
    # Cluster profile only (deployments/): Dagster's PostgreSQL (the same URL the deployment's
    # dagster.yaml reads), the RayCluster spec a run gets when no PRX_RAY_ADDRESS is set, and
    # whether the code location checks its services when it loads (cluster.check_cluster_startup).
    postgres_url: str | None = None
    kuberay_spec: str | None = None
    startup_checks: bool = True
    rows_per_fragment: int = 1_000_000
    # Smallest bucket published for training, in unskipped samples: at least your global batch
    # size (per-device batch x devices), since a trainer batches per stream and a stream that
    # cannot fill one batch makes streaming raise. Smaller buckets stay in the tree, unpublished.
    # 32 by default: PRX's device_per_stream reader at per-device batches up to 32 never meets a
    # stream it cannot fill (issue 22); raise it to your global batch size.
    min_stream_samples: int = Field(32, ge=1)
    # On by default (issue 22): re-export the unskipped images of a sparse bucket (fewer than
    # min_stream_samples) into the nearest bucket of the same tier that is published on its own,
    # at most fold_max_steps aspect-grid steps away (each step crops about 11 % more of the long
    # side; docs/trainable_export.md), so the default min_stream_samples loses none of them.
    # Further than that the bucket stays unpublished (listed in the data card).
    fold_sparse_buckets: bool = True
    fold_max_steps: int = Field(2, ge=1, le=4)
    # One writer per source table (prx_data/core/locking.py): how long a second run waits for the
    # lock, and how long an object-store lease lives without renewal (a killed run's lease).
    lock_wait_s: float = 1800.0
    lock_ttl_s: float = 60.0
    # Dedup radius k: phashes within this Hamming distance are duplicates. 0 is PRX's exact
    # rule; 2 is the smallest radius that keeps >= 98 % of re-encodes and half-size copies with
    # no false positive in benchmarks/bench_near_dup.py (docs/dedup.md).
    dedup_radius: int = Field(2, ge=0, le=32)
    # Backend configs (see prx_data/models/captioning/config.py, prx_data/models/labeling/config.py).
    captioner: dict = Field(default_factory=lambda: {"backend": "source"})
    classifier: dict = Field(default_factory=lambda: {"backend": "minilm"})

    def lock_policy(self):

        return LockPolicy(wait_s=self.lock_wait_s, ttl_s=self.lock_ttl_s)

    @model_validator(mode="after")
    def _cluster_needs_remote_roots(self) -> "Settings":
        if self.env == "cluster":
            for name in ("lance_root", "mds_root"):
                value = getattr(self, name)
                if "://" not in value:
                    raise ValueError(
                        f"PRX_ENV=cluster needs an object-storage URI for {name} "
                        f"(PRX_{name.upper()}), got {value!r}"
                    )
                if value.split("://", 1)[0] not in ("s3", "gs"):
                    raise ValueError(f"PRX_{name.upper()}={value!r}: only s3:// and gs:// roots are supported")
            if not self.postgres_url:
                raise ValueError(
                    "PRX_ENV=cluster needs PRX_POSTGRES_URL (postgresql+psycopg2://user:password@host:5432/db), "
                    "the database of Dagster's runs and events"
                )
            # SQLAlchemy (dagster-postgres) no longer knows "postgres://".
            if not self.postgres_url.startswith(("postgresql://", "postgresql+psycopg2://")):
                raise ValueError("PRX_POSTGRES_URL must be a postgresql+psycopg2:// (or postgresql://) URL")
        if self.ray_address:
            _check_ray_address(self.ray_address)
        return self


def _check_ray_address(address: str) -> None:
    from urllib.parse import urlparse

    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme not in ("ray", "http", "https") or not parsed.hostname or port is None:
        raise ValueError(f"PRX_RAY_ADDRESS={address!r} is not a Ray address (ray://host:10001, host:6379 or auto)")


def _storage_options_from_env(env: os._Environ | dict) -> dict[str, str]:
    options = {}
    for key, option in (
        ("PRX_S3_ENDPOINT", "aws_endpoint"),
        ("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
        ("AWS_REGION", "aws_region"),
    ):
        if env.get(key):
            options[option] = env[key]
    if env.get("PRX_S3_ENDPOINT", "").startswith("http://"):
        options["allow_http"] = "true"
    return options


def load_settings(env: dict | None = None) -> Settings:
    env = os.environ if env is None else env
    name = env.get("PRX_ENV", "local")
    if name not in ("local", "cluster"):
        raise ValueError(f"PRX_ENV={name!r}: expected 'local' or 'cluster'")
    data_root = env.get("PRX_DATA_ROOT") or str(Path.cwd() / "data")
    local_base = data_root if not is_remote(data_root) else str(Path.cwd() / "data")
    return Settings(
        env=name,
        data_root=data_root,
        sources_dir=env.get("PRX_SOURCES_DIR") or str(Path(local_base) / "sources"),
        optout_dir=env.get("PRX_OPTOUT_DIR") or str(Path(local_base) / "optout"),
        lance_root=env.get("PRX_LANCE_ROOT") or f"{data_root.rstrip('/')}/lance",
        mds_root=env.get("PRX_MDS_ROOT") or f"{data_root.rstrip('/')}/mds",
        storage_options=_storage_options_from_env(env),
        ray_address=env.get("PRX_RAY_ADDRESS") or None,
        postgres_url=env.get("PRX_POSTGRES_URL") or None,
        kuberay_spec=env.get("PRX_KUBERAY_SPEC") or None,
        startup_checks=env.get("PRX_STARTUP_CHECKS", "1").strip().lower() not in ("0", "false", "no", "off"),
        rows_per_fragment=int(env.get("PRX_ROWS_PER_FRAGMENT", 1_000_000)),
        min_stream_samples=int(env.get("PRX_MIN_STREAM_SAMPLES", 32)),
        fold_sparse_buckets=_flag(env.get("PRX_FOLD_SPARSE_BUCKETS", "1")),
        fold_max_steps=int(env.get("PRX_FOLD_MAX_STEPS", 2)),
        lock_wait_s=float(env.get("PRX_LOCK_WAIT_S", 1800)),
        lock_ttl_s=float(env.get("PRX_LOCK_TTL_S", 60)),
        dedup_radius=int(env.get("PRX_DEDUP_RADIUS", 2)),
        captioner=_json_env(env, "PRX_CAPTIONER", {"backend": "source"}),
        classifier=_json_env(env, "PRX_CLASSIFIER", {"backend": "minilm"}),
    )


def _flag(raw: str) -> bool:
    """A yes/no setting; anything else is refused rather than read as "no" (an opt-in typo)."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a yes/no flag (1/0, true/false, yes/no, on/off), got {raw!r}")


def _json_env(env, name: str, default: dict) -> dict:
    import json

    raw = env.get(name)
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object (a backend config): {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
