"""Bounded submission of Ray tasks: a billion-row table or a million-unit source never becomes
that many queued tasks, results come back in completion order, and a worker's own exception
(not Ray's wrapper) reaches the caller, with the tasks still in flight cancelled."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

# The address of the Ray a command started (prx_data.app.local_ray); Ray tasks join it when set.
ADDRESS_VAR = "PRX_RAY_ADDRESS"


def bounded(ray, submit: Callable[[Any], Any], items: Iterator[Any], limit: int) -> Iterator[Any]:
    """``submit(item)`` returns an ObjectRef; at most ``limit`` are in flight at once."""
    in_flight: list[Any] = []
    try:
        while True:
            while len(in_flight) < limit:
                item = next(items, None)
                if item is None:
                    break
                in_flight.append(submit(item))
            if not in_flight:
                return
            done, in_flight = ray.wait(in_flight, num_returns=1)
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:
                raise (exc.cause or exc) from None
            yield result
    finally:
        # On error, or when the caller stops early (a closed generator), nothing keeps running.
        for ref in in_flight:
            ray.cancel(ref)


def task_options(*, num_cpus: float, max_retries: int, resources: dict[str, float] | None = None) -> dict:
    """``ray.remote`` options; ``resources`` adds custom node resources a task must find (e.g.
    ``{"cpu_pool": 0.01}`` places it only on nodes started with that resource)."""
    options: dict = {"num_cpus": num_cpus, "max_retries": max_retries}
    if resources:
        bad = {k: v for k, v in resources.items() if not isinstance(k, str) or not isinstance(v, (int, float)) or v <= 0}
        if bad:
            raise ValueError(f"task resources must map names to positive amounts, got {bad}")
        options["resources"] = dict(resources)
    return options


def parse_task_resources(text: str | None) -> dict[str, float] | None:
    """A JSON object such as '{"prx_isolated": 0.01}' (a setting's value); None when empty."""
    if not text or not text.strip():
        return None
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"task resources must be a JSON object, got {text!r}")
    task_options(num_cpus=1, max_retries=0, resources=value)  # validates
    return {str(k): float(v) for k, v in value.items()}
