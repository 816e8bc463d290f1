"""Cluster profile: a KubeRay cluster per run through dagster-ray."""

from __future__ import annotations

from dagster_ray import RayResource

from prx_data.settings import Settings


def build_cluster_ray(settings: Settings) -> RayResource:
    if settings.ray_address:
        # An existing long-lived Ray cluster (KubeRay or otherwise): connect to it.
        from dagster_ray import LocalRay

        class ExistingRay(LocalRay):
            @property
            def ray_address(self) -> str:  # type: ignore[override]
                return settings.ray_address  # type: ignore[return-value]

        return ExistingRay(ray_init_options={"ignore_reinit_error": True})
    from dagster_ray.kuberay import KubeRayCluster

    return KubeRayCluster()
