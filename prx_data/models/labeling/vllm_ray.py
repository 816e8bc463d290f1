"""The ``vllm`` label backend: Qwen3-8B in vLLM through Ray Data's LLM API, text only.

The label task of :mod:`prx_data.models.labeling.task` run by the shared vLLM path of
:mod:`prx_data.models.inference.vllm_engine`: the answer is constrained to the three labels by
structured output (``choice``) and thinking is off in the chat template. Rows in:
``sample_id``, ``caption``. Rows out: ``sample_id`` and :data:`prx_data.core.schema.LABEL_COLUMNS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prx_data.models.derived_columns import LABEL
from prx_data.models.inference import vllm_engine
from prx_data.models.inference.vllm_backend import VLLMTaskBackend
from prx_data.models.labeling.base import BaseClassifier, LabelResult
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


class VLLMClassifier(VLLMTaskBackend[LabelResult], BaseClassifier):
    """The label task on vLLM (:class:`~prx_data.models.inference.vllm_backend.VLLMTaskBackend`)."""

    result_type = LabelResult
    columns = LABEL
    dataset_inputs = ("caption",)

    def __init__(self, config: VLLMClassifierConfig) -> None:
        self.config = config
        self.model_id = config.model_id

    @property
    def version(self) -> str:
        return label_prompt_version()

    def run_dataset(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        return label_dataset_vllm(ds, self.config)
