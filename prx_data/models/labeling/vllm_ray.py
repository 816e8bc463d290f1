"""The ``vllm`` label backend: Qwen3-8B in vLLM through Ray Data's LLM API, text only.

The label task of :mod:`prx_data.models.labeling.task` run by the shared vLLM path of
:mod:`prx_data.models.captioning.vllm_engine`: the answer is constrained to the three labels by
structured output (``choice``) and thinking is off in the chat template. Rows in:
``sample_id``, ``caption``. Rows out: ``sample_id`` and :data:`prx_data.core.schema.LABEL_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prx_data.core.reasons import with_detail
from prx_data.models.captioning import vllm_engine
from prx_data.models.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
from prx_data.models.labeling.config import VLLMClassifierConfig
from prx_data.models.labeling.prompt import label_prompt_version
from prx_data.models.labeling.task import NO_THINKING, LabelTask

if TYPE_CHECKING:
    import ray.data


def label_dataset_vllm(ds: ray.data.Dataset, cfg: VLLMClassifierConfig) -> ray.data.Dataset:
    """Lazily label ``ds`` (rows with ``sample_id`` and ``caption``)."""
    return vllm_engine.run_task(
        ds,
        LabelTask(cfg.model_id, cfg.max_tokens),
        cfg,
        engine=vllm_engine.engine_kwargs(cfg),
        multimodal=False,
        max_tokens=cfg.max_tokens,
        chat_template_kwargs=NO_THINKING,
    )


class VLLMClassifier(BaseClassifier):
    """The vLLM backend behind the common interface; use :meth:`label_dataset` for real runs
    (:meth:`label_batch` starts the engine for every call)."""

    @property
    def label_version(self) -> str:
        return label_prompt_version()

    def __init__(self, config: VLLMClassifierConfig) -> None:
        self.config = config
        self.model_id = config.model_id

    def label_dataset(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        return label_dataset_vllm(ds, self.config)

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        import ray.data

        items = [{"sample_id": str(i), "caption": c} for i, c in enumerate(captions)]
        if not items:
            return []
        out = {r["sample_id"]: r for r in self.label_dataset(ray.data.from_items(items)).take_all()}
        results = []
        for item in items:
            r = out.get(item["sample_id"])
            if r is None:
                results.append(LabelResult(error=with_detail(LabelErrorCode.INFERENCE_ERROR, "row lost")))
            elif r["label_error"] is not None:
                results.append(LabelResult(error=r["label_error"]))
            else:
                results.append(LabelResult(label=r["label"]))
        return results
