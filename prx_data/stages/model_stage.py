"""A model stage: the columns a model makes for every row (value, model, version, error), declared
once and run by the base.

A stage declares what it is: its columns (``columns``), its backends (``backends``, a typed
config picks one), the identity recorded in each row and how a row is judged current
(``identity``, ``column_stage``: model and version, the inputs fingerprinted, what a new value
invalidates), the table columns a request is made from (``reads``), what each Ray task asks for
(``resources``), and how results become Arrow (``results_table``). The base gives it a backend's
lifecycle and every place its work runs:

- ``setup(config)`` builds the backend (clients, weights) once per worker, ``process_batch``
  runs a chunk of rows through it, ``teardown(backend)`` closes it (HTTP clients, models);
- chunks run in this process or as Ray tasks (``stages.executors``): each process keeps its
  backends in :data:`WORKER_BACKENDS`, set up on its first chunk of a (stage, config). This
  process's are torn down when the stage ends (failed or not); a Ray worker keeps its own for
  the stage's next chunks and the job's next runs (a warm worker), and tears one down when a
  third config of the same stage displaces it, or when it exits;
- a backend that streams a Ray Dataset (``run_dataset``: vLLM on GPU replicas) is set up here,
  takes the rows as Ray Data reads them, and is torn down when its stream is consumed.

``stages.caption_stage`` and ``stages.label_stage`` are the two declarations.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import lance
import pyarrow as pa
from pydantic import BaseModel

from prx_data.core.lance_io import storage_options_of
from prx_data.core.ray_tasks import Executor, ensure_ray
from prx_data.models.inference.backend import ModelBackend, ModelResult
from prx_data.models.inference.columns import DerivedColumns
from prx_data.models.inference.factory import BackendFactory
from prx_data.models.inference.stage_timings import record_stage_timings
from prx_data.models.inference.vllm_engine import VLLMStageConfig
from prx_data.stages.column_spec import ColumnStage
from prx_data.stages.column_stage import Chunked, Processor, StageStats, address_chunks, read_images, read_rows, run_column_stage
from prx_data.stages.executors import RowFn, make_processor

C = TypeVar("C", bound=BaseModel)
B = TypeVar("B", bound=ModelBackend)


@dataclass(frozen=True)
class Reads:
    """What a chunk reads from the source table for its backend: row columns, and image bytes."""

    columns: tuple[str, ...] = ()
    images: bool = False


@dataclass(frozen=True)
class Resources:
    """What each of the stage's Ray tasks asks for: CPUs, and the custom resources that keep it
    on the nodes offering them (PRX_RAY_TASK_RESOURCES)."""

    cpus: float = 1.0
    custom: dict[str, float] | None = None

    def pinned(self, custom: dict[str, float] | None) -> Resources:
        return Resources(self.cpus, dict(custom) if custom else None)


class ModelStage(ABC, Generic[C, B]):
    """A model stage's declaration (one instance per stage, at module level: Ray tasks pickle it
    by its class); the subclass names what is abstract here, the base runs it."""

    columns: ClassVar[DerivedColumns]
    backends: ClassVar[BackendFactory]
    # Rows per chunk (one task each) when the caller names none.
    chunk_rows: ClassVar[int] = 256

    @property
    def name(self) -> str:
        """The stage is named by its value column: the staging table, ``<name>_run_id``,
        ``<name>_input_fp``, its Ray Data timings (PRX_STAGE_TIMINGS: ``captions <model>``)."""
        return self.columns.value

    # -- what the stage is ----------------------------------------------------------------------

    @abstractmethod
    def identity(self, config: C) -> tuple[str, str]:
        """(model, version) the backend will record in every row, without building it."""

    @abstractmethod
    def column_stage(self, config: C) -> ColumnStage:
        """What the stage owns in the table and which rows are current."""

    @abstractmethod
    def reads(self, config: C) -> Reads: ...

    @abstractmethod
    def results_table(self, sample_ids: Sequence[str], results: Sequence[Any], model_id: str, version: str, /) -> pa.Table:
        """``sample_id`` and the stage's columns, one row per result."""

    def streams(self, config: C) -> bool:
        """Whether the backend streams a Ray Dataset (the vLLM engine) instead of taking chunks."""
        return isinstance(config, VLLMStageConfig)

    def resources(self, config: C) -> Resources:
        # Beside the engine, whole-CPU read tasks would wait for the CPUs its stage actors hold.
        return Resources(cpus=config.cpu_stage_num_cpus) if isinstance(config, VLLMStageConfig) else Resources()

    def placement(self, config: C, executor: Executor, task_resources: dict[str, float] | None) -> Executor:
        """Where the chunks run; a stage overrides it for backends that need no worker."""
        return executor

    def stream_chunk_rows(self, config: C, chunk_rows: int) -> int:
        """Rows per Ray Data read task of a stream (never all rows in one driver block)."""
        return chunk_rows

    def finish_batch(self, batch: pa.Table) -> pa.Table:
        """A streamed batch as the stage stores it."""
        return batch

    def parse(self, data: dict[str, Any] | C) -> C:
        return self.backends.parse(data)

    # -- the backend's lifecycle, once per worker ----------------------------------------------

    def setup(self, config: C) -> B:
        backend = self.backends.make(config)
        made = (backend.model_id, backend.version)
        if made != self.identity(config):
            backend.close()
            # Rows would record one identity and be judged by another: redone on every run.
            raise RuntimeError(f"{self.name} backend {type(backend).__name__} records {made}, the stage expects {self.identity(config)}")
        return backend

    def process_batch(self, backend: B, sample_ids: list[str], images: list[bytes | None], rows: pa.Table) -> pa.Table:
        inputs = rows.to_pylist() if rows.num_columns else [{} for _ in sample_ids]
        results: list[ModelResult] = backend.run_batch([{"image": image, **row} for image, row in zip(images, inputs)])
        return self.results_table(sample_ids, results, backend.model_id, backend.version)

    def teardown(self, backend: B) -> None:
        backend.close()

    # -- running ---------------------------------------------------------------------------------

    def chunk_fn(self, config: C) -> RowFn:
        """What a worker runs per chunk (picklable): the worker's backend for ``config``."""
        return functools.partial(_process_chunk, self, config.model_dump_json())

    def compute(
        self,
        table_uri: str,
        config: C | dict,
        *,
        executor: Executor = "ray",
        chunk_rows: int | None = None,
        storage_options: dict | None = None,
        progress=None,
        run_id: str | None = None,
        task_resources: dict[str, float] | None = None,
        local_max_rows: int | None = None,
    ) -> StageStats:
        """Make the stage's columns for every row to do of ``table_uri`` (resumable, one commit;
        ``stages.column_stage``). ``task_resources``: custom Ray resources the stage's CPU tasks
        ask for (the chunk tasks, or a stream's table reads; the engine follows its own
        ``worker_env.node_resource``)."""
        config = self.parse(config)
        chunk_rows = chunk_rows or self.chunk_rows
        resources = self.resources(config).pinned(task_resources)
        if self.streams(config):
            processor = self._streamed(config, self.stream_chunk_rows(config, chunk_rows), resources)
        else:
            reads = self.reads(config)
            processor = make_processor(
                self.chunk_fn(config),
                columns=reads.columns,
                with_images=reads.images,
                executor=self.placement(config, executor, task_resources),
                chunk_rows=chunk_rows,
                num_cpus=resources.cpus,
                task_resources=resources.custom,
                local_max_rows=local_max_rows,
            )
        with WORKER_BACKENDS.run_here(self, config.model_dump_json()):
            stats = run_column_stage(
                table_uri,
                self.column_stage(config),
                processor,
                storage_options=storage_options,
                progress=progress,
                run_id=run_id,
                error_column=self.columns.error,
            )
        stats.extra.update(zip((self.columns.model, self.columns.version), self.identity(config)))
        return stats

    def _streamed(self, config: C, chunk_rows: int, resources: Resources) -> Processor:
        """Rows -> Ray Data (read tasks, which ask for ``resources``) -> the backend's stream ->
        result batches of ``staging_rows`` (one staging fragment each)."""
        reads, engine = self.reads(config), config
        assert isinstance(engine, VLLMStageConfig), "only the vLLM engine streams"

        def run(ds: lance.LanceDataset, todo: pa.Table | Chunked) -> Iterator[pa.Table]:
            import ray.data

            chunks = [
                {"addresses": c.column("_rowaddr").to_pylist(), "sample_ids": c.column("sample_id").to_pylist()}
                for c in address_chunks(todo, chunk_rows)
            ]
            if not chunks:
                return
            ensure_ray()  # joins the run's Ray here, not when the run starts (core.ray_tasks)
            rows = ray.data.from_items(chunks).flat_map(
                functools.partial(_read_chunk, uri=ds.uri, version=ds.version, options=storage_options_of(ds), reads=reads),
                num_cpus=resources.cpus,
                resources=resources.custom,
            )
            backend = self.setup(config)
            try:
                out = backend.run_dataset(rows)  # type: ignore[attr-defined]
                for batch in out.iter_batches(batch_size=engine.staging_rows, batch_format="pyarrow"):
                    yield self.finish_batch(batch)
                record_stage_timings(out, f"{self.name}s {engine.model_id}")
            finally:
                self.teardown(backend)

        return run


def _read_chunk(item: dict, *, uri: str, version: int, options: dict | None, reads: Reads) -> list[dict]:
    """A stream's rows of one chunk: ``sample_id``, the image bytes if read, the read columns."""
    ds = lance.dataset(uri, version=version, storage_options=options)
    addresses = item["addresses"]
    table = read_rows(ds, addresses, list(reads.columns))
    columns = {name: table.column(name).to_pylist() for name in reads.columns}
    images = read_images(ds, addresses) if reads.images else None
    out = []
    for i, sample_id in enumerate(item["sample_ids"]):
        row: dict[str, Any] = {"sample_id": sample_id}
        if images is not None:
            row["image"] = images[i]
        row.update((name, values[i]) for name, values in columns.items())
        out.append(row)
    return out


def _process_chunk(stage: ModelStage, config_json: str, sample_ids: list[str], images: list[bytes | None], rows: pa.Table) -> pa.Table:
    return stage.process_batch(WORKER_BACKENDS.get(stage, config_json), sample_ids, images, rows)


class WorkerBackends:
    """The backends set up in this process, by (stage, config): each set up once, torn down when
    the stage's runs here end (:meth:`run_here`), when a newer config of its stage displaces it
    (:attr:`PER_STAGE` per stage: a Ray worker keeps its own across runs), or when the process
    exits."""

    PER_STAGE = 2

    def __init__(self) -> None:
        self._held: OrderedDict[tuple[str, str], tuple[ModelStage, ModelBackend]] = OrderedDict()
        self._runs: dict[tuple[str, str], int] = {}
        self._lock = threading.RLock()
        self._at_exit = False

    def get(self, stage: ModelStage, config_json: str) -> ModelBackend:
        key = (stage.name, config_json)
        displaced = []
        with self._lock:
            if key in self._held:
                self._held.move_to_end(key)
                return self._held[key][1]
            backend = stage.setup(stage.parse(json.loads(config_json)))
            self._held[key] = (stage, backend)
            same_stage = [k for k in self._held if k[0] == stage.name]
            displaced = [self._held.pop(k) for k in same_stage[: max(0, len(same_stage) - self.PER_STAGE)]]
            if not self._at_exit:
                atexit.register(self.release_all)
                self._at_exit = True
        for old_stage, old in displaced:
            old_stage.teardown(old)
        return backend

    def held(self, stage: ModelStage) -> list[ModelBackend]:
        with self._lock:
            return [backend for (name, _), (_, backend) in self._held.items() if name == stage.name]

    @contextlib.contextmanager
    def run_here(self, stage: ModelStage, config_json: str) -> Iterator[None]:
        """A run of the stage in this process: what its chunks set up here is torn down when the
        last such run of (stage, config) ends, failed or not."""
        key = (stage.name, config_json)
        with self._lock:
            self._runs[key] = self._runs.get(key, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._runs[key] -= 1
                last = not self._runs[key]
                if last:
                    del self._runs[key]
            if last:
                self.release(stage, config_json)

    def release(self, stage: ModelStage, config_json: str) -> None:
        with self._lock:
            entry = self._held.pop((stage.name, config_json), None)
        if entry is not None:
            entry[0].teardown(entry[1])

    def release_all(self) -> None:
        with self._lock:
            entries = list(self._held.values())
            self._held.clear()
        for stage, backend in entries:
            stage.teardown(backend)


# One per process: the local executor's (released when its stage ends) or a Ray worker's.
WORKER_BACKENDS = WorkerBackends()

__all__ = ["WORKER_BACKENDS", "ModelStage", "Reads", "Resources", "WorkerBackends"]
