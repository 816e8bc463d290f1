"""Typed resources of the code location; ``defs/resource_set.py`` builds one of each from the
chosen environment (``prx_data.core.settings``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster_ray import LocalRay
from pydantic import Field, PrivateAttr

from prx_data.compat.ray_config import in_process_ray_auth
from prx_data.core.locking import LockPolicy
from prx_data.core.locking import configure as configure_locks
from prx_data.core.paths import StoragePaths
from prx_data.core.ray_tasks import LOCAL_MAX_ROWS
from prx_data.core.storage import OPTION_ENV
from prx_data.core.storage import SECRET_OPTIONS as SECRET_STORAGE_OPTIONS
from prx_data.defs.cluster import ConnectOnDemand
from prx_data.ingest.ownership import SpecOwners
from prx_data.ingest.registry import Registry, load_registry

# storage_options keys that are secrets, and the environment variable each comes from. Dagster
# stores a resource's config in the job snapshot (runs.db / PostgreSQL) in plain text, so these
# reach the resource only as EnvVar references, resolved in the run's process.
SECRET_OPTIONS = {option: OPTION_ENV[option] for option in SECRET_STORAGE_OPTIONS}


class StorageResource(dg.ConfigurableResource):
    """Where Lance tables and MDS streams live, and how to reach object storage.

    ``storage_options`` holds only what is not secret (endpoint, region); the key id, secret and
    session token are separate fields set to ``EnvVar``s, so the snapshot names the variable and
    never holds its value."""

    lance_root: str
    mds_root: str
    storage_options: dict[str, str] = Field(default_factory=dict)
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_session_token: str | None = None
    rows_per_fragment: int = 1_000_000
    lock_wait_s: float = 1800.0
    lock_ttl_s: float = 60.0

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Every table writer of the run takes its lock with these timings.
        configure_locks(LockPolicy(wait_s=self.lock_wait_s, ttl_s=self.lock_ttl_s))

    @property
    def paths(self) -> StoragePaths:
        return StoragePaths(lance_root=self.lance_root, mds_root=self.mds_root)

    @property
    def options(self) -> dict | None:
        secrets = {name: getattr(self, name) for name in SECRET_OPTIONS if getattr(self, name)}
        return {**self.storage_options, **secrets} or None


def storage_config(options: dict[str, str], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``options`` split for a StorageResource: the plain ones, and each secret as an EnvVar.

    A secret that does not come from its environment variable (settings built from another
    mapping) cannot be passed by reference; it is refused rather than written into Dagster's
    storage."""
    env = os.environ if environ is None else environ
    plain = {k: v for k, v in options.items() if k not in SECRET_OPTIONS}
    secrets: dict[str, str] = {}
    for option, variable in SECRET_OPTIONS.items():
        if option not in options:
            continue
        if env.get(variable) != options[option]:
            raise ValueError(
                f"storage option {option} must come from the environment variable {variable}: "
                "Dagster would store any other value in plain text in its run storage"
            )
        secrets[option] = dg.EnvVar(variable)
    return {"storage_options": plain, **secrets}


class SourceRegistryResource(dg.ConfigurableResource):
    """The source specs (one YAML per source, PRX_SOURCES_DIR) and the opt-out requests folder
    (PRX_OPTOUT_DIR)."""

    sources_dir: str
    optout_dir: str

    def load(self, storage: StorageResource | None = None) -> Registry:
        """The registry; with ``storage``, a name two specs claim stays with the spec its table
        was built from (``ingest.ownership``). Every caller that ingests or decides runs passes it."""
        owners = SpecOwners(storage.paths, storage.options) if storage is not None else None
        return load_registry(self.sources_dir, owners)


class RayTasksResource(dg.ConfigurableResource):
    """Where the pipeline's Ray tasks may run: the custom node resources each CPU task asks for
    (PRX_RAY_TASK_RESOURCES), passed to every stage that submits Ray work. Empty: any node."""

    task_resources: dict[str, float] = Field(default_factory=dict)
    # Executor "auto" runs up to this many rows in the run's process (PRX_LOCAL_MAX_ROWS).
    local_max_rows: int = Field(LOCAL_MAX_ROWS, ge=0)

    @property
    def resources(self) -> dict[str, float] | None:
        return dict(self.task_resources) or None


class RunLocalRay(ConnectOnDemand, LocalRay):
    """Ray started inside the run's process (when a stage first needs it) and stopped when the
    run ends, shared by the run's steps. Used only when no Ray address is set (plain ``dagster dev``); ``prx-data run``,
    ``demo`` and ``ui`` keep one local Ray for all their runs and connect to it instead. Built
    with ``Lifecycle(connect=False)``: Ray starts through ``connect_now``, under its own auth."""

    _auth: contextlib.ExitStack | None = PrivateAttr(default=None)

    def connect_now(self, context: dg.InitResourceContext) -> Any:
        if not self.connected:
            # A token of its own and loopback only, as for the command's head (core.ray_auth).
            self._auth = contextlib.ExitStack()
            self._auth.enter_context(in_process_ray_auth())
        return super().connect_now(context)

    def cleanup(self, context: Any, exception: BaseException | None) -> None:
        try:
            super().cleanup(context, exception)
        finally:
            if self._auth is not None:
                self._auth.close()
                self._auth = None
