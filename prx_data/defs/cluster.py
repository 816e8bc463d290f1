"""Cluster profile: Ray on Kubernetes through dagster-ray, and the checks a cluster code location
runs when it loads.

Two ways to reach Ray (see deployments/k8s/README.md):

- ``PRX_RAY_ADDRESS`` set (``ray://prx-ray-head-svc:10001``): every run connects to one
  long-lived, autoscaling RayCluster (``deployments/k8s/raycluster.yaml`` applied once). vLLM
  replicas stay warm between runs; this is the default for corpus builds.
- unset: each step gets its own cluster as a KubeRay ``RayJob`` in interactive mode
  (``KubeRayInteractiveJob``), built from the ``spec`` of the manifest ``PRX_KUBERAY_SPEC`` names
  (the code-location image names its copy of that same manifest). Isolation per run, at the price of a cold start per step.

``check_cluster_startup`` runs when the resources are built (code location load), so a wrong or
missing setting fails the deployment at start, with the setting named, instead of failing a run
hours later.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dagster as dg
import yaml
from dagster_ray import LocalRay, RayResource
from dagster_ray.configs import Lifecycle, RayDataExecutionOptions
from pydantic import Field, PrivateAttr

from prx_data.core.permanent_errors import PermanentError
from prx_data.core.ray_tasks import connection_is_held, ray_provider, task_options, wait_for_task_resources, warming
from prx_data.core.settings import Settings
from prx_data.core.storage import ObjectStoreError, check_access
from prx_data.defs.compat.dagster_ray_internals import connect, forget_connection

# Ray options for a code location talking to a remote cluster: never start a local one.
_REMOTE_RAY_INIT = {"ignore_reinit_error": True, "log_to_driver": True}


class ClusterStartupError(RuntimeError):
    """A cluster deployment cannot work as configured; the message names the setting."""


# Warm-up tasks per node CPU, at most this many: enough to start a small cluster's workers.
WARM_UP_TASKS = 64


def start_stage_workers(ray: Any) -> None:
    """One task per CPU (up to ``WARM_UP_TASKS``), placed like the stages' (PRX_RAY_TASK_RESOURCES),
    that imports the CPU stages' code: the job's workers are started and warm before its first
    stage submits (``core.ray_tasks.warming``)."""
    # lazy: the code location never needs lance or the stages
    from prx_data.core.settings import get_settings
    from prx_data.stages.warm_up import import_stage_code

    resources = get_settings().ray_task_resources or None
    tasks = max(1, min(WARM_UP_TASKS, int(ray.cluster_resources().get("CPU", 1))))
    remote = ray.remote(num_cpus=1, resources=resources, max_retries=0)(import_stage_code)
    ray.get([remote.remote() for _ in range(tasks)], timeout=120)


class ConnectOnDemand:
    """A dagster-ray resource that joins Ray when a stage first submits Ray work
    (``core.ray_tasks.ensure_ray``), not when the run starts, when built with
    ``Lifecycle(connect=False)``: a run with little to do never pays for the connection."""

    def connect_now(self, context: dg.InitResourceContext) -> Any:
        """Join Ray now, on the run's first Ray work: the lifecycle's connect step, at that moment."""
        return connect(self, context)  # type: ignore[arg-type]  # mixed into a RayResource

    @contextlib.contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[Any]:
        with super().yield_for_execution(context) as resource:  # type: ignore[misc]
            if resource.lifecycle.connect:
                yield resource
            else:
                with ray_provider("connect", lambda: resource.connect_now(context)), warming(start_stage_workers):
                    yield resource


class PinnedDataOptions(RayDataExecutionOptions):
    """dagster-ray's Ray Data options, whose remote half (a task named ``apply`` that dagster-ray
    runs on connect) asks for the pipeline's task resources like every other task, and waits a
    bounded time for a node that offers them instead of queueing forever."""

    task_resources: dict[str, float] = Field(default_factory=dict)
    resource_wait_s: float = 60.0

    def apply_remote(self):
        # lazy: ray is a measured heavy import
        import ray

        resources = dict(self.task_resources) or None
        wait_for_task_resources(ray, resources, self.resource_wait_s)
        options = self

        def apply_data_options() -> None:
            options.apply()

        ray.get(ray.remote(**task_options(num_cpus=1, max_retries=0, resources=resources))(apply_data_options).remote())


def data_options(settings: Settings) -> PinnedDataOptions:
    return PinnedDataOptions(
        verbose_progress=False, task_resources=dict(settings.ray_task_resources), resource_wait_s=settings.ray_resource_wait_s
    )


class RayClusterAddress(ConnectOnDemand, LocalRay):
    """A Ray cluster that already runs (KubeRay RayCluster or ``ray start --head``): connect only.

    LocalRay's lifecycle (nothing to create, wait for or delete) is exactly right; only the
    address differs. Within ``core.ray_tasks.connection_held`` (``prx-data run``) the connection
    outlives the run, so the command's next run finds its Ray workers warm.
    """

    address: str
    data_execution_options: PinnedDataOptions = Field(default_factory=PinnedDataOptions)
    # How long the probe before ``ray.init`` waits for an answer (PRX_RAY_CONNECT_WAIT_S).
    connect_wait_s: float = 10.0
    _permanent: PermanentError | None = PrivateAttr(default=None)

    def connect_now(self, context: dg.InitResourceContext) -> Any:
        if self._permanent is not None:
            raise self._permanent  # every later stage of the run fails at once, the same way
        if not self.connected:
            from prx_data.compat.ray_probe import probe_cluster

            try:
                # A wrong token or an address that is not Ray fails here in seconds, unretried;
                # ray.init would log and wait for minutes (compat.ray_probe).
                probe_cluster(self.address, self.connect_wait_s)
                return super().connect_now(context)
            except PermanentError as exc:
                # Connected, but no node offers the task resources: let go of the connection,
                # or the next stage would find Ray initialised and queue its tasks for ever.
                import ray

                if ray.is_initialized():
                    ray.shutdown()
                self._permanent = exc
                raise
        return super().connect_now(context)

    def cleanup(self, context, exception):
        if connection_is_held():
            forget_connection(self)  # not ours to disconnect any more: the command closes it
        super().cleanup(context, exception)

    @property
    def ray_address(self) -> str:  # type: ignore[override]
        return self.address

    @property
    def host(self) -> str:
        return urlparse(self.address if "://" in self.address else f"ray://{self.address}").hostname or self.address

    @property
    def name(self) -> str:
        return f"Ray cluster at {self.address}"


def load_raycluster_manifest(path: str | Path | None) -> dict[str, Any]:
    """The RayCluster manifest that ``PRX_KUBERAY_SPEC`` names (the code-location image sets it to
    its copy of ``deployments/k8s/raycluster.yaml``): named, not looked up beside the package,
    which an installed wheel does not have."""
    if not path:
        raise ClusterStartupError(
            "PRX_KUBERAY_SPEC is not set: with no PRX_RAY_ADDRESS, each step runs on a KubeRay RayJob "
            "built from a RayCluster manifest; set PRX_KUBERAY_SPEC to one (deployments/k8s/raycluster.yaml "
            "in the repository), or PRX_RAY_ADDRESS=ray://<head>:10001 to use a running cluster"
        )
    path = Path(path)
    try:
        manifest = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ClusterStartupError(f"PRX_KUBERAY_SPEC: no RayCluster manifest at {path}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "RayCluster" or "spec" not in manifest:
        raise ClusterStartupError(f"PRX_KUBERAY_SPEC: {path} is not a RayCluster manifest")
    return manifest


def build_kuberay_job(manifest: dict[str, Any]) -> RayResource:
    """A per-step RayJob (interactive mode) whose cluster is the manifest's spec."""
    from dagster_ray.kuberay import KubeRayInteractiveJob
    from dagster_ray.kuberay.configs import DEFAULT_AUTOSCALER_OPTIONS, RayClusterSpec
    from dagster_ray.kuberay.resources.rayjob import InteractiveRayJobConfig, InteractiveRayJobSpec

    spec = manifest["spec"]
    cluster_spec = RayClusterSpec(
        head_group_spec=spec["headGroupSpec"],
        worker_group_specs=spec["workerGroupSpecs"],
        ray_version=spec.get("rayVersion"),
        enable_in_tree_autoscaling=bool(spec.get("enableInTreeAutoscaling", False)),
        autoscaler_options=spec.get("autoscalerOptions", DEFAULT_AUTOSCALER_OPTIONS),
    )
    namespace = manifest.get("metadata", {}).get("namespace", "prx")
    return KubeRayInteractiveJob(
        ray_job=InteractiveRayJobConfig(
            metadata={"namespace": namespace},
            spec=InteractiveRayJobSpec(ray_cluster_spec=cluster_spec, ttl_seconds_after_finished=600),
        ),
        ray_init_options=_REMOTE_RAY_INIT,
    )


def build_cluster_ray(settings: Settings) -> RayResource:
    if settings.startup_checks:
        check_cluster_startup(settings)
    if settings.ray_address:
        return RayClusterAddress(
            address=settings.ray_address,
            connect_wait_s=settings.ray_connect_wait_s,
            ray_init_options=_REMOTE_RAY_INIT,
            lifecycle=Lifecycle(connect=False),
            data_execution_options=data_options(settings),
        )
    return build_kuberay_job(load_raycluster_manifest(settings.kuberay_spec))


# Startup checks ------------------------------------------------------------------------------
def _tcp_reachable(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection opens, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return str(exc) or type(exc).__name__


def check_ray_address(address: str, timeout_s: float = 3.0) -> None:
    if address == "auto":
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    why = _tcp_reachable(parsed.hostname or "", parsed.port or 10001, timeout_s)
    if why:
        raise ClusterStartupError(f"PRX_RAY_ADDRESS={address!r} is unreachable: {why}")


def _redacted(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@", 1)
    return url


def libpq_url(url: str) -> str:
    """'postgresql+psycopg2://...' (SQLAlchemy's form, which Dagster needs) -> 'postgresql://...'."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


def check_postgres(url: str, timeout_s: float = 5.0) -> None:
    import psycopg2

    try:
        psycopg2.connect(libpq_url(url), connect_timeout=max(1, int(timeout_s))).close()
    except psycopg2.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ClusterStartupError(f"PRX_POSTGRES_URL={_redacted(url)!r}: cannot connect: {first}") from None


def check_object_store(settings: Settings) -> None:

    for setting, uri in (("PRX_LANCE_ROOT", settings.lance_root), ("PRX_MDS_ROOT", settings.mds_root)):
        try:
            check_access(uri, settings.storage_options, setting)
        except ObjectStoreError as exc:
            raise ClusterStartupError(str(exc)) from None


def check_kubernetes() -> None:
    """KubeRay mode creates RayJobs: it needs a Kubernetes API it can reach."""
    import os

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not os.path.exists(kubeconfig):
        raise ClusterStartupError(
            "PRX_RAY_ADDRESS is not set, so runs would create KubeRay RayJobs, but no Kubernetes API is "
            "configured (not in a pod, no KUBECONFIG): set PRX_RAY_ADDRESS=ray://<head>:10001 or run in Kubernetes"
        )


def check_cluster_startup(settings: Settings, timeout_s: float = 5.0) -> None:
    """Fail fast, naming the setting, when a cluster deployment cannot work.

    Settings validation already refused missing object-store roots and a missing database URL;
    this checks that each named service answers: PostgreSQL, the object store (with the given
    credentials), and Ray (the address, or a Kubernetes API for KubeRay jobs).
    """
    if settings.postgres_url:
        check_postgres(settings.postgres_url, timeout_s)
    check_object_store(settings)
    if settings.ray_address:
        check_ray_address(settings.ray_address, timeout_s)
    else:
        load_raycluster_manifest(settings.kuberay_spec)
        check_kubernetes()
