"""vLLM through Ray Data's LLM API (``ray.data.llm``), for any :class:`VLMTask`.

Ray Data streams rows through preprocess (CPU: the task's request) -> multimodal prepare ->
chat template -> tokenize -> vLLM engine -> postprocess (the task's judgement). vLLM already
returns the generated text, so Ray's detokenize stage is switched off. ``ray.data.llm`` imports
without vLLM; the stages that need it run in the vLLM worker environment
(:mod:`prx_data.models.inference.gpu_env`).

:class:`VLLMStageConfig` holds the engine and throughput settings both stages share; its
defaults are the H200 profile (docs/gpu.md), the subclasses set the per-stage numbers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from prx_data.core.reasons import with_detail
from prx_data.models.inference.backend import ErrorCode
from prx_data.models.inference.factory import BackendConfig
from prx_data.models.inference.gpu_env import WorkerEnv, gpu_runtime_env, stage_resources
from prx_data.models.inference.vlm import Judged, PrepError, VLMTask

if TYPE_CHECKING:
    import ray.data

PREP_ERROR = "prep_error"
INFERENCE_ERROR = ErrorCode.INFERENCE_ERROR


class VLLMStageConfig(BackendConfig):
    backend: Literal["vllm"] = "vllm"
    model_source: str
    model_id: str
    replicas: int = Field(1, ge=1, description="vLLM engine replicas (one GPU each)")
    device: Literal["gpu", "cpu"] = Field("gpu", description="cpu: vLLM's CPU build (tests)")
    batch_size: int = Field(64, ge=1, description="rows per Ray Data batch into the engine")
    max_concurrent_batches: int = Field(8, ge=1)
    # Under Ray, vLLM falls back to 2048 tokens per step unless this is set: far too few to
    # keep an H200 busy.
    max_num_batched_tokens: int = Field(16384, ge=256)
    max_num_seqs: int = Field(512, ge=1)
    max_model_len: int = Field(4096, ge=256)
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    # Online FP8 weights (Hopper): half the weight memory, more KV cache, faster GEMMs.
    # None when the checkpoint is already quantized (or on CPU).
    quantization: str | None = "fp8"
    kv_cache_dtype: str = "fp8"
    enable_prefix_caching: bool = True  # the system prompt is the same for every row
    accelerator_type: str | None = None
    # Ray's CPU stages (multimodal prepare, chat template, tokenize): actors per stage (an int
    # n autoscales 1..n) and CPUs each; one actor per stage starves a fast GPU. The CPUs also
    # apply to our read, preprocess and postprocess tasks: on a small node whole-CPU tasks next
    # to the engine and the stage actors would never be scheduled.
    cpu_stage_concurrency: int | tuple[int, int] = (1, 4)
    cpu_stage_num_cpus: float = Field(1.0, gt=0)
    # Chat template and tokenize: milliseconds of text work per batch. At the image stages'
    # size (up to 4 whole CPUs each) they held 8 of a 16-core node's cores while mostly idle,
    # and the image preprocessing that feeds the engine waited for CPUs. A quarter CPU each and
    # at most 2 actors: 1 CPU in all, the rest stays with preprocess and multimodal prepare.
    text_stage_concurrency: int | tuple[int, int] = (1, 2)
    text_stage_num_cpus: float = Field(0.25, gt=0)
    # CPU device only: KV cache size in GiB (vLLM reads VLLM_CPU_KVCACHE_SPACE).
    cpu_kv_cache_gib: int = Field(1, ge=1)
    # Results are appended to the Lance staging table this many rows at a time: one fragment
    # each (a fragment per Ray batch was ~31k fragments per million captions). A killed run
    # redoes at most this many rows.
    staging_rows: int = Field(4096, ge=1)
    extra_engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    worker_env: WorkerEnv = WorkerEnv()


def engine_kwargs(cfg: VLLMStageConfig, **task_kwargs: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "max_model_len": cfg.max_model_len,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        **task_kwargs,
    }
    if cfg.device == "gpu":
        kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
        if cfg.quantization:
            kwargs["quantization"] = cfg.quantization
        if cfg.kv_cache_dtype != "auto":
            kwargs["kv_cache_dtype"] = cfg.kv_cache_dtype
    kwargs.update(cfg.extra_engine_kwargs)
    return kwargs


def stage_runtime_env(cfg: VLLMStageConfig) -> dict[str, Any]:
    env = gpu_runtime_env(cfg.worker_env)
    if cfg.device == "cpu":
        # On CPU, vLLM swaps Ray's single-process executor for its multiprocess one (to bind OMP
        # threads), a third process importing vLLM and torch per engine. Without it the
        # weightless tiny caption bench took 67 s, not 85 s (medians of 3, 2 cores); the worker
        # env's own env_vars win.
        cpu_defaults = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kv_cache_gib), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        env["env_vars"] = {**cpu_defaults, **env["env_vars"]}
    return env


def processor_config(cfg: VLLMStageConfig, *, engine: dict[str, Any], multimodal: bool, chat_template_kwargs: dict | None = None):
    from ray.data.llm import vLLMEngineProcessorConfig

    cpu_stage = {"concurrency": cfg.cpu_stage_concurrency, "num_cpus": cfg.cpu_stage_num_cpus}
    text_stage = {"concurrency": cfg.text_stage_concurrency, "num_cpus": cfg.text_stage_num_cpus}
    extra: dict[str, Any] = {}
    if cfg.device == "cpu":
        # No GPU to ask for: the engine actor takes one CPU bundle instead.
        extra["placement_group_config"] = {"bundles": [{"CPU": 1}]}
    return vLLMEngineProcessorConfig(
        model_source=cfg.model_source,
        engine_kwargs=engine,
        batch_size=cfg.batch_size,
        concurrency=cfg.replicas,
        max_concurrent_batches=cfg.max_concurrent_batches,
        accelerator_type=cfg.accelerator_type,
        runtime_env=stage_runtime_env(cfg),
        # Parses the image parts of the messages into vLLM multimodal data (Ray 2.60 name).
        prepare_multimodal_stage={"enabled": multimodal, **cpu_stage},
        chat_template_stage={
            "enabled": True,
            **text_stage,
            **({"chat_template_kwargs": chat_template_kwargs} if chat_template_kwargs else {}),
        },
        tokenize_stage={"enabled": True, **text_stage},
        # vLLM returns the text with the tokens: a detokenize pass would redo it on the CPU.
        detokenize_stage={"enabled": False},
        # A failed row becomes a row with an error column, not a failed job.
        should_continue_on_error=True,
        **extra,
    )


def preprocess(row: dict[str, Any], *, task: VLMTask) -> dict[str, Any]:
    """Row -> request. Ray carries every input column through all stages, so the inputs are
    replaced by None here: only the request travels on (not the raw image bytes)."""
    dropped = {name: None for name in task.inputs}
    try:
        req = task.request(row)
        error = None
    except PrepError as exc:
        req, error = task.placeholder(), exc.code
    out = {**dropped, "messages": req.messages, "sampling_params": req.sampling, PREP_ERROR: error}
    if req.mm_processor_kwargs is not None:
        out["mm_processor_kwargs"] = req.mm_processor_kwargs
    return out


def postprocess(row: dict[str, Any], *, task: VLMTask, max_tokens: int) -> dict[str, Any]:
    """Engine output -> the task's columns. Ray's vLLM stage does not expose vLLM's
    finish_reason; a generation that used all of ``max_tokens`` is the same signal."""
    if row.get(PREP_ERROR):
        return task.row(row.get("sample_id"), Judged(error=row[PREP_ERROR]))
    n_generated = int(row.get("num_generated_tokens") or 0)
    finish = "length" if n_generated >= max_tokens else "stop"
    return task.row(row.get("sample_id"), task.judge(row.get("generated_text"), finish))


def finalize(row: dict[str, Any], *, task: VLMTask) -> dict[str, Any]:
    """Rows the engine failed on (``should_continue_on_error``) get the same columns."""
    failure = row.get("__inference_error__")
    if failure:
        return task.row(row.get("sample_id"), Judged(error=with_detail(INFERENCE_ERROR, failure)))
    return {k: row.get(k) for k in task.output_keys}


def build_processor(
    task: VLMTask,
    cfg: VLLMStageConfig,
    *,
    engine: dict[str, Any],
    multimodal: bool,
    max_tokens: int,
    chat_template_kwargs: dict | None = None,
):
    """A ``ray.data.llm`` Processor for ``task``; call it on a dataset of input rows."""
    from ray.data.llm import build_processor as ray_build_processor

    cpus = {"num_cpus": cfg.cpu_stage_num_cpus}
    processor = ray_build_processor(
        processor_config(cfg, engine=engine, multimodal=multimodal, chat_template_kwargs=chat_template_kwargs),
        preprocess=functools.partial(preprocess, task=task),
        postprocess=functools.partial(postprocess, task=task, max_tokens=max_tokens),
        preprocess_map_kwargs=cpus,
        postprocess_map_kwargs=cpus,
    )
    resources = stage_resources(cfg.worker_env)
    if resources:
        for stage in processor.stages.values():
            merged = {**stage.map_batches_kwargs.get("resources", {}), **resources}
            stage.map_batches_kwargs["resources"] = merged
    return processor


def run_task(ds: ray.data.Dataset, task: VLMTask, cfg: VLLMStageConfig, **build: Any) -> ray.data.Dataset:
    """Lazily run ``task`` over ``ds``; nothing runs until the result is consumed."""
    processor = build_processor(task, cfg, **build)
    return processor(ds).map(functools.partial(finalize, task=task), num_cpus=cfg.cpu_stage_num_cpus)
