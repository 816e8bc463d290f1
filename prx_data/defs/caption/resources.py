"""Captioner and classifier resources: which backend runs, chosen by configuration.

The backend configs are the plain pydantic models of ``prx_data.models.captioning`` /
``prx_data.models.labeling`` (Ray workers receive them as JSON); these resources only hold them.
"""

import json
from typing import Any

import dagster as dg
from pydantic import Field

from prx_data.models.captioning.config import CaptionerConfig
from prx_data.models.captioning.factory import parse_captioner_config
from prx_data.models.labeling.config import ClassifierConfig
from prx_data.models.labeling.factory import parse_classifier_config


class CaptionerResource(dg.ConfigurableResource):
    """The captioning backend (PRX_CAPTIONER): source (keeps source captions, the CPU default),
    openai (any OpenAI-compatible server), transformers or vllm (GPU workers); the other keys
    are that backend's config (prx_data/models/captioning/config.py)."""

    config_json: str = Field(default='{"backend": "source"}', description="The backend config as JSON.")

    def config(self) -> CaptionerConfig:
        return parse_captioner_config(json.loads(self.config_json))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaptionerResource":
        parse_captioner_config(data)  # fail at load, naming the bad field
        return cls(config_json=json.dumps(data))


class ClassifierResource(dg.ConfigurableResource):
    """The caption classifier (PRX_CLASSIFIER) that labels each caption visual, text or nsfw:
    minilm (zero-shot on the CPU, the default), openai (a server elsewhere) or vllm (GPU)."""

    config_json: str = Field(default='{"backend": "minilm"}')

    def config(self) -> ClassifierConfig:
        return parse_classifier_config(json.loads(self.config_json))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ClassifierResource":
        parse_classifier_config(data)
        return cls(config_json=json.dumps(data))
