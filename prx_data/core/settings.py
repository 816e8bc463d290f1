"""The one place where the environment is chosen.

``PRX_ENV`` picks a profile (``local`` by default, ``cluster`` for PostgreSQL/KubeRay/object
storage); every other setting is an override of that profile read from ``PRX_*`` variables
(``PRX_<FIELD NAME>``, parsed and typed by pydantic-settings). Nothing else in the package reads
the environment for configuration. A value that does not parse is refused with the variable and
the value named (``PRX_MIN_STREAM_SAMPLES: '4k' is not an integer``), all problems at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from prx_data.core.locking import LockPolicy
from prx_data.core.ray_tasks import LOCAL_MAX_ROWS
from prx_data.core.storage import is_remote, storage_options_from_env, uri_problem

EnvName = Literal["local", "cluster"]

# Caption labels whose samples the skip lists leave out of training unless told otherwise: the
# default of the export resource's ``exclude_labels``, of ``prx-data optout apply --exclude-label``
# and of the plain functions that build skip lists.
EXCLUDE_LABELS: tuple[str, ...] = ("nsfw", "text")
# The default of PRX_SHARD_RETENTION_DAYS, and of the plain functions that collect garbage.
SHARD_RETENTION_DAYS = 7.0

ENV_PREFIX = "PRX_"
# Values never echoed in an error message: they can hold a password.
_SECRET_FIELDS = frozenset({"postgres_url", "storage_options"})
# The environment load_settings() reads; os.environ unless a caller passes its own mapping
# (tests, the explorer), which must then be the only source.
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("prx_settings_environ", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of os.environ."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        from pydantic_settings.sources.utils import parse_env_vars

        environ = _ENVIRON.get()
        return parse_env_vars(
            os.environ if environ is None else environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


class Settings(BaseSettings):
    # Validation errors would otherwise print the inputs, credentials included; load_settings
    # words its own messages and leaves secret values out.
    # env_ignore_empty: an empty variable means "the default", as `PRX_X= prx-data ...` suggests.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, hide_input_in_errors=True, env_ignore_empty=True, extra="ignore", case_sensitive=False
    )

    env: EnvName = "local"
    data_root: str = Field(description="Root of all data (a folder or an s3:// / gs:// URI).")
    sources_dir: str = Field(description="Folder holding one YAML spec per source.")
    optout_dir: str = Field(description="Folder holding opt-out requests (YAML/JSON).")
    views_dir: str = Field(description="Folder holding one YAML file per ablation view (docs/views.md).")
    lance_root: str
    mds_root: str
    # Credentials and endpoint for object storage, passed to Lance and MDS as-is. Read from
    # AWS_* / PRX_S3_ENDPOINT by load_settings (core.storage.storage_options_from_env), never
    # from a PRX_STORAGE_OPTIONS variable.
    storage_options: dict[str, str] = Field(default_factory=dict)
    ray_address: str | None = None
    # Custom Ray resources every CPU task of the pipeline asks for (ingest units, phash, caption
    # and label chunks, the vLLM stages' image/caption reads, export writers), as a JSON object:
    # PRX_RAY_TASK_RESOURCES='{"cpu_pool": 0.01}' places that work only on nodes started with
    # the resource (a KubeRay worker group's rayStartParams resources). Empty: anywhere.
    ray_task_resources: dict[str, float] = Field(default_factory=dict)
    # Up to this many rows of a CPU stage's work (phash, CPU captioners and labellers, export)
    # run in the run's own process instead of as Ray tasks (executor "auto", the default), so a
    # run with little to do never joins Ray (seconds per run). 0: always Ray. Work pinned by
    # PRX_RAY_TASK_RESOURCES always goes to Ray.
    local_max_rows: int = Field(LOCAL_MAX_ROWS, ge=0)
    # Fail fast on a cluster that cannot work: how long a driver waits for something to answer
    # as a Ray cluster at PRX_RAY_ADDRESS (a head that restarts is back within it), and for a
    # live node that offers PRX_RAY_TASK_RESOURCES (raise it when an autoscaler starts those
    # nodes from zero). Past either wait the run fails once, naming the setting, unretried.
    ray_connect_wait_s: float = Field(10.0, ge=0)
    ray_resource_wait_s: float = Field(60.0, ge=0)
    # Defaults for a source spec that does not set its own ``workers`` (ingest units read at
    # once) or ``write_workers`` (export Ray tasks that each encode and write a share of the
    # rows): more spreads that work over the cluster's nodes.
    ingest_workers: int | None = Field(None, ge=1, le=1024)
    write_workers: int | None = Field(None, ge=1, le=1024)
    # Cluster profile only (deployments/): Dagster's PostgreSQL (the same URL the deployment's
    # dagster.yaml reads), the RayCluster spec a run gets when no PRX_RAY_ADDRESS is set, and
    # whether the code location checks its services when it loads (cluster.check_cluster_startup).
    postgres_url: str | None = None
    kuberay_spec: str | None = None
    startup_checks: bool = True
    # How often the daemon's sensors look for work (new or edited specs, opt-out folder changes,
    # automation conditions): the longest a landed source waits before its run is requested.
    sensor_interval_s: int = Field(30, ge=1)
    rows_per_fragment: int = Field(1_000_000, ge=1)
    # Smallest bucket published for training, in unskipped samples: at least your global batch
    # size (per-device batch x devices), since a trainer batches per stream and a stream that
    # cannot fill one batch makes streaming raise. Smaller buckets stay in the tree, unpublished.
    # 32 by default: PRX's device_per_stream reader at per-device batches up to 32 never meets a
    # stream it cannot fill; raise it to your global batch size.
    min_stream_samples: int = Field(32, ge=1)
    # Where `prx-data explore` answers: the Dagster UI's links to the data card, a source's
    # samples and a bucket's shards point there.
    explorer_url: str = "http://127.0.0.1:8765"
    # How long shards and bucket indexes that stopped being published (replaced by a re-export
    # or a rewrite, or left by a retired bucket) stay in the tree before garbage collection may
    # delete them, counted from the merge that stopped publishing them: a trainer that opened
    # the tree before keeps reading for this long. Training runs last days to weeks.
    shard_retention_days: float = Field(SHARD_RETENTION_DAYS, ge=0)
    # On by default: re-export the unskipped images of a sparse bucket (fewer than
    # min_stream_samples) into the nearest bucket of the same tier that is published on its own,
    # at most fold_max_steps aspect-grid steps away (each step crops about 11 % more of the long
    # side; docs/trainable_export.md), so the default min_stream_samples loses none of them.
    # Further than that the bucket stays unpublished (listed in the data card).
    fold_sparse_buckets: bool = True
    fold_max_steps: int = Field(2, ge=1, le=4)
    # One writer per source table (prx_data/core/locking.py): how long a second run waits for the
    # lock, and how long an object-store lease lives without renewal (a killed run's lease).
    lock_wait_s: float = Field(1800.0, ge=0)
    lock_ttl_s: float = Field(60.0, gt=0)
    # Dedup radius k: phashes within this Hamming distance are duplicates. 0 is PRX's exact
    # rule; 2 is the smallest radius that keeps >= 98 % of re-encodes and half-size copies with
    # no false positive in benchmarks/bench_near_dup.py (docs/dedup.md).
    dedup_radius: int = Field(2, ge=0, le=32)
    # Backend configs as JSON objects (see prx_data/models/captioning/config.py,
    # prx_data/models/labeling/config.py).
    captioner: dict[str, Any] = Field(default_factory=lambda: {"backend": "source"})
    classifier: dict[str, Any] = Field(default_factory=lambda: {"backend": "minilm"})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env file and no secrets directory: the environment (or the mapping given to
        # load_settings) is the only place settings come from.
        return init_settings, _MappingEnvSource(settings_cls)

    @property
    def shard_retention_s(self) -> float:
        return self.shard_retention_days * 86400.0

    def lock_policy(self) -> LockPolicy:
        return LockPolicy(wait_s=self.lock_wait_s, ttl_s=self.lock_ttl_s)

    @model_validator(mode="before")
    @classmethod
    def _derive_roots(cls, data: Any) -> Any:
        # The roots default to folders of PRX_DATA_ROOT; the request and spec folders stay on
        # local disk (under ./data) when the data root is an object store.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data_root = data.get("data_root") or str(Path.cwd() / "data")
        local_base = data_root if not is_remote(data_root) else str(Path.cwd() / "data")
        data["data_root"] = data_root
        data.setdefault("sources_dir", str(Path(local_base) / "sources"))
        data.setdefault("optout_dir", str(Path(local_base) / "optout"))
        data.setdefault("views_dir", str(Path(local_base) / "views"))
        data.setdefault("lance_root", f"{data_root.rstrip('/')}/lance")
        data.setdefault("mds_root", f"{data_root.rstrip('/')}/mds")
        return data

    @model_validator(mode="after")
    def _cluster_needs_remote_roots(self) -> Settings:
        for name in ("data_root", "lance_root", "mds_root"):
            problem = uri_problem(getattr(self, name))
            if problem:
                raise ValueError(f"PRX_{name.upper()}: {problem}")
        if self.env == "cluster":
            for name in ("lance_root", "mds_root"):
                value = getattr(self, name)
                if "://" not in value:
                    raise ValueError(f"PRX_ENV=cluster needs an object-storage URI for {name} (PRX_{name.upper()}), got {value!r}")
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
        if self.ray_task_resources:
            bad = {k: v for k, v in self.ray_task_resources.items() if v <= 0}
            if bad:
                raise ValueError(f"PRX_RAY_TASK_RESOURCES: every amount must be positive (a share of a node's resource), got {bad}")
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


def env_name(field: str) -> str:
    """The variable a settings field is read from (``min_stream_samples`` -> ``PRX_MIN_STREAM_SAMPLES``)."""
    return f"{ENV_PREFIX}{field.upper()}"


@contextmanager
def _reading(environ: Mapping[str, str]) -> Iterator[None]:
    token = _ENVIRON.set(environ)
    try:
        yield
    finally:
        _ENVIRON.reset(token)


# What a pydantic error type means for a value read from a variable, in words.
_EXPECTED = {
    "int_parsing": "is not an integer",
    "int_from_float": "is not an integer",
    "float_parsing": "is not a number",
    "bool_parsing": "is not a yes/no flag (1/0, true/false, yes/no, on/off)",
    "literal_error": "is not one of",
    "dict_type": "is not a JSON object",
}


def _describe(error: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    loc = error.get("loc") or ()
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if not loc:  # a check across settings (model validator): its message names the variables
        return message
    field = str(loc[0])
    name = env_name(field)
    raw = next((v for k, v in environ.items() if k.upper() == name), None)
    if raw is None or field in _SECRET_FIELDS:
        return f"{name}: {message}" if raw is None else f"{name}: invalid value ({message})"
    kind = error.get("type", "")
    if kind == "literal_error":
        return f"{name}: {raw!r} {message.replace('Input should be', 'is not').rstrip('.')}"
    if kind in _EXPECTED:
        return f"{name}: {raw!r} {_EXPECTED[kind]}"
    return f"{name}: {raw!r} {message.replace('Input should be', 'should be')}"


class InvalidSettings(ValueError):
    """A PRX_* variable that does not parse or check; the message names each one."""


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``env`` (os.environ by default) and nothing else.

    Raises InvalidSettings (a ValueError) naming every variable that does not parse or check, with its value
    (secret ones left out).
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    try:
        with _reading(environ):
            return Settings(storage_options=storage_options_from_env(environ))
    except ValidationError as exc:
        problems = [_describe(error, environ) for error in exc.errors(include_input=False)]
        raise InvalidSettings("invalid settings: " + "; ".join(problems)) from None
    except SettingsError as exc:
        # pydantic-settings fails this way on a JSON field (PRX_CAPTIONER) that is not JSON.
        field = next((f for f in Settings.model_fields if f'"{f}"' in str(exc)), None)
        name = env_name(field) if field else "a PRX_* variable"
        raise InvalidSettings(f"invalid settings: {name} must be a JSON object ({exc.__cause__ or exc})") from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
