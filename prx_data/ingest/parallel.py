"""Run input units: in this process (``workers: 1``), or as Ray tasks, ``workers`` at a time.

The Ray used is the one the process has (a RayResource), else the command's shared head
(``PRX_RAY_ADDRESS``, see ``prx_data.app.local_ray``), else a local Ray started for this ingest
and stopped after it. Submission is bounded, so a source of a million units is never a million
queued tasks, and results come back in completion order.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

from prx_data.compat.ray_config import in_process_ray_auth
from prx_data.core.quiet import quiet_ray_env
from prx_data.core.ray_tasks import ADDRESS_VAR, bounded, ensure_ray, task_options
from prx_data.ingest.changes import UnitJob, UnitResult, process_unit
from prx_data.ingest.units import Unit

UnitWork = tuple[Unit, frozenset[int]]


def run_units(
    job: UnitJob, units: Iterable[UnitWork], workers: int, task_resources: dict[str, float] | None = None
) -> Iterator[UnitResult]:
    """``task_resources``: custom Ray resources each unit task asks for (where it may run)."""
    if workers <= 1:
        for unit, skip in units:
            yield process_unit(job, unit, skip)
        return
    with _ray(workers) as ray:
        yield from _on_ray(ray, job, iter(units), workers, task_resources)


def _on_ray(ray, job: UnitJob, units: Iterator[UnitWork], workers: int, task_resources: dict[str, float] | None) -> Iterator[UnitResult]:
    # A retried task writes fresh fragments; the failed attempt's are never committed.
    task = ray.remote(**task_options(num_cpus=1, max_retries=1, resources=task_resources))(process_unit)
    job_ref = ray.put(job)
    yield from bounded(ray, lambda work: task.remote(job_ref, *work), units, workers)


@contextlib.contextmanager
def _ray(workers: int):
    import ray

    # The run's own connection when it has one (joined now, on demand), else the command's head.
    if ensure_ray(required=False) is not None:
        yield ray
        return
    address = os.environ.get(ADDRESS_VAR) or None

    os.environ.update({k: v for k, v in quiet_ray_env().items() if k not in os.environ})
    options: dict[str, Any] = dict(ignore_reinit_error=True, include_dashboard=False, configure_logging=False, log_to_driver=False)
    with contextlib.ExitStack() as stack:
        if address:
            ray.init(address=address, **options)
        else:
            stack.enter_context(in_process_ray_auth())  # a Ray of its own: token auth, loopback
            ray.init(num_cpus=workers, _node_ip_address="127.0.0.1", **options)
        try:
            yield ray
        finally:
            ray.shutdown()  # only this process's connection (or the Ray it started)
