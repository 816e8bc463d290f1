"""Bounded submission of Ray tasks: a billion-row table or a million-unit source never becomes
that many queued tasks, results come back in completion order, and a worker's own exception
(not Ray's wrapper) reaches the caller, with the tasks still in flight cancelled."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Literal

# The address of the Ray a command started (prx_data.app.local_ray); Ray tasks join it when set.
ADDRESS_VAR = "PRX_RAY_ADDRESS"

# Default of PRX_LOCAL_MAX_ROWS: up to this many rows a stage with executor "auto" runs in the
# run's process. Joining Ray costs seconds (the command's head, the run's connection, a fresh
# worker's imports), more than one core spends on 256 rows of any CPU stage (export, the
# slowest, does ~40 images/s per core).
LOCAL_MAX_ROWS = 256

# Where a stage runs its chunks: Ray tasks, this process, or "auto": this process when the work
# is small (``local_max_rows``: PRX_LOCAL_MAX_ROWS, LOCAL_MAX_ROWS) and not pinned to labelled
# nodes, else Ray. Here, not in stages.executors, so the asset configs name it without lance.
Executor = Literal["ray", "local", "auto"]

# Ray on demand. Nothing joins Ray until a stage submits Ray work: a run with little to do never
# needs it, and joining costs seconds (waiting for the command's head, ~5 s; the run's
# connection, ~3.5 s; measured on the demo). Whoever can provide Ray registers here for as long
# as it can: the command's local head ("start": make it run) and the run's dagster-ray resource
# ("connect": ray.init to it), and what can get Ray going without waiting for it ("prefetch": a
# stage that finds much work ahead, so the head starts while that work is done). A module-level
# list, because the stages (importable by Ray workers without Dagster) must not be handed Dagster
# resources.
ProviderKind = Literal["start", "connect", "prefetch"]
_PROVIDERS: list[tuple[ProviderKind, Callable[[], None]]] = []


@contextlib.contextmanager
def ray_provider(kind: ProviderKind, provide: Callable[[], None]) -> Iterator[None]:
    entry = (kind, provide)
    _PROVIDERS.append(entry)
    try:
        yield
    finally:
        _PROVIDERS.remove(entry)


# Set while a command that runs several Dagster runs in its process (``prx-data run``) wants the
# driver's Ray connection kept from one run to the next: the job's workers then stay up, with
# their imports and loaded models (a new connection is a new Ray job, with new workers).
_HELD: list[None] = []


@contextlib.contextmanager
def connection_held() -> Iterator[None]:
    """Keep the Ray connection a run's resource makes for the runs after it; close it at the end."""
    _HELD.append(None)
    try:
        yield
    finally:
        _HELD.pop()
        if not _HELD:
            _AHEAD.clear()
            ray = sys.modules.get("ray")  # never imported: never connected
            if ray is not None and ray.is_initialized():
                ray.shutdown()


def connection_is_held() -> bool:
    return bool(_HELD)


# Set (within ``connection_held``) once the command knows its work will need Ray, so a run that
# starts after that can warm Ray up from its start (``warming``).
_AHEAD: list[None] = []


def prefetch_ray() -> None:
    """Work ahead will need Ray: get it starting now, without waiting (no-op when nothing can)."""
    if _HELD and not _AHEAD:
        _AHEAD.append(None)
    for kind, provide in list(_PROVIDERS):
        if kind == "prefetch":
            provide()


def start_ray() -> None:
    """Make sure the Ray this process is meant to join runs (the command's head, once up)."""
    for kind, provide in list(_PROVIDERS):
        if kind == "start":
            provide()


# A stage and the background warm-up (``warming``) may ask at once: one of them connects.
_CONNECTING = threading.RLock()


def ensure_ray(required: bool = True):
    """The ``ray`` module, initialised: already, or by the innermost registered connector.
    ``required=False`` returns None instead of raising when nothing can connect."""
    # lazy: ray is a measured heavy import (~1.5 s)
    import ray

    if not ray.is_initialized():
        with _CONNECTING:
            if not ray.is_initialized():
                start_ray()
                connectors = [provide for kind, provide in _PROVIDERS if kind == "connect"]
                if connectors:
                    connectors[-1]()
    if ray.is_initialized():
        return ray
    if required:
        raise RuntimeError("Ray is not initialized: run this stage with a dagster-ray RayResource (or call ray.init first)")
    return None


@contextlib.contextmanager
def warming(warm_up: Callable[[Any], None]) -> Iterator[None]:
    """While a run lasts: once its work is known to need Ray (``prefetch_ray``, before the run
    or during it), join Ray in a background thread and call ``warm_up(ray)`` there (start the
    job's workers and their imports), beside the run's local work (ingest), so the first Ray
    stage finds both done. A failure there is left to that stage, which connects again and
    reports it. The run's end waits for the connection (made through the run's own connector),
    not for ``warm_up``, whose tasks may wait for nodes a run that failed early never needs.
    Only while the connection is held (``connection_held``: the runs of one ``prx-data run``, in
    its process): elsewhere each step may be a process of its own, which would warm a
    connection only to drop it."""
    connected: list[threading.Event] = []

    def warm(done: threading.Event) -> None:
        try:
            ray = ensure_ray(required=False)
        except Exception:  # noqa: BLE001 - the stage that needs Ray reports its own failure
            ray = None
        finally:
            done.set()
        if ray is not None:
            with contextlib.suppress(Exception):
                warm_up(ray)

    def start() -> None:
        if _HELD and not connected:
            connected.append(threading.Event())
            threading.Thread(target=warm, args=(connected[0],), name="prx-ray-warm-up", daemon=True).start()

    with ray_provider("prefetch", start):
        if _AHEAD:
            start()
        try:
            yield
        finally:
            for done in connected:
                done.wait()


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


def wait_for_task_resources(ray, resources: dict[str, float] | None, wait_s: float, poll_s: float = 0.5) -> None:
    """Return once a live node offers every custom resource of ``resources``; after ``wait_s``
    raise a :class:`PermanentError` naming what the nodes do offer (a task asking for a label no
    node has waits forever in Ray's queue)."""
    if not resources:
        return
    import time

    from prx_data.core.permanent_errors import PermanentError

    deadline = time.monotonic() + wait_s
    while True:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if any(all(n["Resources"].get(k, 0) >= v for k, v in resources.items()) for n in nodes):
            return
        if time.monotonic() >= deadline:
            offered = sorted({k for n in nodes for k in n["Resources"] if k not in _BUILT_IN and not k.startswith("node:")})
            raise PermanentError(
                f"no live Ray node offers the task resources {json.dumps(resources)} after {wait_s:.0f}s "
                f"({len(nodes)} live nodes; custom resources they offer: {', '.join(offered) or 'none'})",
                "PRX_RAY_TASK_RESOURCES to a resource your worker nodes start with (or PRX_RAY_RESOURCE_WAIT_S longer)",
            )
        time.sleep(poll_s)


_BUILT_IN = frozenset({"CPU", "GPU", "memory", "object_store_memory", "accelerator_type"})


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
