"""Bounded submission of Ray tasks: a billion-row table or a million-unit source never becomes
that many queued tasks, results come back in completion order, and a worker's own exception
(not Ray's wrapper) reaches the caller, with the tasks still in flight cancelled."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

# The address of the Ray a command started (prx_data.app.local_ray); Ray tasks join it when set.
ADDRESS_VAR = "PRX_RAY_ADDRESS"


def bounded(ray, submit: Callable[[Any], Any], items: Iterator[Any], limit: int) -> Iterator[Any]:
    """``submit(item)`` returns an ObjectRef; at most ``limit`` are in flight at once."""
    in_flight = []
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
