"""Pick a captioning backend from its config.

Backends are imported lazily so that choosing ``source`` never imports torch, Ray or httpx.
Nothing here imports vLLM: it only exists in the GPU workers' environment.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from prx_data.models.captioning.base import BaseCaptioner
from prx_data.models.captioning.config import (
    CaptionerConfig,
    OpenAICaptionerConfig,
    SourceCaptionerConfig,
    TransformersCaptionerConfig,
    VLLMCaptionerConfig,
)
from prx_data.models.captioning.source import SourceCaptioner

_ADAPTER = TypeAdapter(CaptionerConfig)


def parse_captioner_config(data: dict[str, Any] | CaptionerConfig) -> CaptionerConfig:
    """Validate a plain dict (YAML, Dagster run config) into the backend's config."""
    if isinstance(data, dict):
        return _ADAPTER.validate_python(data)
    return data


def make_captioner(config: dict[str, Any] | CaptionerConfig) -> BaseCaptioner:
    """The captioner the config's ``backend`` names.

    For ``vllm`` the result also has ``caption_dataset(ds)``, the streaming Ray Data path that
    real runs should use (see :class:`prx_data.models.captioning.vllm_ray.VLLMCaptioner`)."""
    config = parse_captioner_config(config)
    if isinstance(config, SourceCaptionerConfig):
        return SourceCaptioner()
    if isinstance(config, OpenAICaptionerConfig):
        # lazy: pulls in pyarrow, numpy
        from prx_data.models.captioning.openai_backend import OpenAICaptioner

        return OpenAICaptioner(config)
    if isinstance(config, TransformersCaptionerConfig):
        # lazy: pulls in pyarrow, numpy
        from prx_data.models.captioning.transformers_backend import TransformersCaptioner

        return TransformersCaptioner(config)
    if isinstance(config, VLLMCaptionerConfig):
        # lazy: pulls in pyarrow, numpy
        from prx_data.models.captioning.vllm_ray import VLLMCaptioner

        return VLLMCaptioner(config)
    raise TypeError(f"unknown captioner config {type(config).__name__}")
