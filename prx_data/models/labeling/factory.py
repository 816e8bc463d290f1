"""Pick a label backend from its config (backends imported lazily; nothing imports vLLM)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from prx_data.models.labeling.base import BaseClassifier
from prx_data.models.labeling.config import (
    ClassifierConfig,
    MiniLMClassifierConfig,
    OpenAIClassifierConfig,
    VLLMClassifierConfig,
)
from prx_data.models.labeling.minilm import MiniLMClassifier
from prx_data.models.labeling.openai_backend import OpenAIClassifier
from prx_data.models.labeling.vllm_ray import VLLMClassifier

_ADAPTER = TypeAdapter(ClassifierConfig)


def parse_classifier_config(data: dict[str, Any] | ClassifierConfig) -> ClassifierConfig:
    if isinstance(data, dict):
        return _ADAPTER.validate_python(data)
    return data


def make_classifier(config: dict[str, Any] | ClassifierConfig) -> BaseClassifier:
    """The classifier the config's ``backend`` names. For ``vllm`` the result also has
    ``label_dataset(ds)``, the streaming path real runs should use."""
    config = parse_classifier_config(config)
    if isinstance(config, MiniLMClassifierConfig):
        return MiniLMClassifier(config)
    if isinstance(config, OpenAIClassifierConfig):
        return OpenAIClassifier(config)
    if isinstance(config, VLLMClassifierConfig):
        return VLLMClassifier(config)
    if getattr(config, "backend", None) == "fused":
        raise TypeError("the 'fused' label backend runs no model: the captioner writes the labels (VLLMCaptionerConfig.fused_label)")
    raise TypeError(f"unknown classifier config {type(config).__name__}")
