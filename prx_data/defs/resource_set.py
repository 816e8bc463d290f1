"""The code location's resources: one for every key the assets and sensors ask for, built in one
place from the chosen environment (``prx_data.core.settings``) when the Definitions load.

Apart from ``defs/resources.py`` (the shared resource types) so that the wiring modules that
declare their own resource types (``caption/``, ``export/``) import the shared ones without a
cycle back to the module that builds them all.
"""

from __future__ import annotations

import dagster as dg
from dagster_ray import RayResource
from dagster_ray.configs import Lifecycle

from prx_data.core.settings import Settings, get_settings
from prx_data.defs.caption.resources import CaptionerResource, ClassifierResource
from prx_data.defs.cluster import RayClusterAddress, build_cluster_ray, data_options
from prx_data.defs.export.resources import ExportResource
from prx_data.defs.resources import RayTasksResource, RunLocalRay, SourceRegistryResource, StorageResource, storage_config

_LOCAL_RAY_INIT = {
    "ignore_reinit_error": True,
    "include_dashboard": False,
    "configure_logging": False,
    "log_to_driver": False,
}


def build_resources(settings: Settings | None = None) -> dict[str, object]:
    settings = settings or get_settings()
    ray: RayResource
    if settings.env == "cluster":
        ray = build_cluster_ray(settings)
    elif settings.ray_address:
        # A cluster this run did not create: connect (on demand) and disconnect, never "delete" it
        # (dagster-ray would log that it deleted it, though deleting does nothing here).
        ray = RayClusterAddress(
            address=settings.ray_address,
            connect_wait_s=settings.ray_connect_wait_s,
            ray_init_options=_LOCAL_RAY_INIT,
            lifecycle=Lifecycle(connect=False, cleanup="never"),
            data_execution_options=data_options(settings),
        )
    else:
        ray = RunLocalRay(
            ray_init_options={**_LOCAL_RAY_INIT, "_node_ip_address": "127.0.0.1"},
            lifecycle=Lifecycle(connect=False),
            data_execution_options=data_options(settings),
        )
    return {
        "export": ExportResource(),
        "captioner": CaptionerResource.from_dict(settings.captioner),
        "classifier": ClassifierResource.from_dict(settings.classifier),
        "storage": StorageResource(
            lance_root=settings.lance_root,
            mds_root=settings.mds_root,
            **storage_config(settings.storage_options),
            rows_per_fragment=settings.rows_per_fragment,
            lock_wait_s=settings.lock_wait_s,
            lock_ttl_s=settings.lock_ttl_s,
        ),
        "registry": SourceRegistryResource(sources_dir=settings.sources_dir, optout_dir=settings.optout_dir),
        "ray": ray,
        "ray_tasks": RayTasksResource(
            task_resources=settings.ray_task_resources,
            local_max_rows=settings.local_max_rows,
            ingest_workers=settings.ingest_workers,
            write_workers=settings.write_workers,
        ),
    }


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=build_resources())
