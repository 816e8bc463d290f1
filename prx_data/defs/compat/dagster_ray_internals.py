"""dagster-ray: connecting a Ray resource later than its lifecycle says, and letting go of a
connection the resource did not make.

- ``connect``: ``BaseRayResource._connect`` is what ``yield_for_execution`` calls when
  ``Lifecycle(connect=True)``: wait for the cluster, connect, then ``on_connect``. A resource
  built with ``connect=False`` and joined on demand (``defs/cluster.py``'s ``ConnectOnDemand``)
  takes the same path, so its logs and hooks are those of a connect at start.
- ``forget_connection``: ``cleanup`` disconnects whatever ``_context`` holds; a connection held
  by the command (``core.ray_tasks.connection_held``) must outlive the run, so the resource
  forgets it first.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import dagster_ray
from dagster_ray import RayResource

WRITTEN_FOR = "0.4.8"


def connect(resource: RayResource, context: dg.InitResourceContext) -> Any:
    """Connect ``resource`` now, as its lifecycle's connect step does (idempotent)."""
    return resource._connect(context)


def forget_connection(resource: RayResource) -> None:
    """Make ``resource`` believe it holds no connection, so ``cleanup`` does not disconnect it."""
    resource._context = None


def version_mismatch() -> str | None:
    """Why the installed dagster-ray may not be the one these adapters were written for, or None."""
    installed = getattr(dagster_ray, "__version__", None)
    if installed == WRITTEN_FOR:
        return None
    return (
        f"dagster-ray is {installed}, prx_data.defs.compat.dagster_ray_internals was written for {WRITTEN_FOR}: "
        "re-check BaseRayResource._connect (wait, connect, on_connect; a no-op when connected) and that "
        "cleanup disconnects only what _context holds, then update WRITTEN_FOR"
    )
