"""What each stage records as its identity and version, readable without the stages: the code
location computes code versions from these when it loads, and must not pull in lance to do so
(the stage modules import it; Dagster loads the code location in every process)."""

from __future__ import annotations

import hashlib

from prx_data.imaging.buckets import BUCKETING_VERSION, BucketConfig
from prx_data.imaging.transform import JPEG_QUALITY
from prx_data.models.captioning.config import (
    CaptionerConfig,
    OpenAICaptionerConfig,
    SourceCaptionerConfig,
    TransformersCaptionerConfig,
    VLLMCaptionerConfig,
)
from prx_data.models.captioning.prompt import caption_prompt_version, fused_prompt_version
from prx_data.models.captioning.source import SOURCE_MODEL_ID, SOURCE_PROMPT_VERSION
from prx_data.models.labeling.config import (
    MINILM,
    ClassifierConfig,
    FusedClassifierConfig,
    MiniLMClassifierConfig,
    OpenAIClassifierConfig,
    VLLMClassifierConfig,
)
from prx_data.models.labeling.minilm import minilm_label_version
from prx_data.models.labeling.prompt import label_prompt_version

# Bump when the resize/encode path changes in a way that changes exported bytes.
TRANSFORM_VERSION = "lanczos-cover-crop-v1"


def export_version(bucket_cfg: BucketConfig) -> str:
    """Names everything that decides the exported bytes; a change marks exports stale."""
    digest = hashlib.sha256(bucket_cfg.model_dump_json().encode()).hexdigest()[:10]
    return f"{TRANSFORM_VERSION}-q{JPEG_QUALITY}-buckets-{BUCKETING_VERSION}-{digest}"


def caption_identity(config: CaptionerConfig) -> tuple[str, str]:
    """(caption_model, caption_prompt_version) a backend will record, without loading it."""
    if isinstance(config, SourceCaptionerConfig):
        return SOURCE_MODEL_ID, SOURCE_PROMPT_VERSION
    if isinstance(config, OpenAICaptionerConfig):
        return config.model_id or config.server.model, caption_prompt_version()
    if isinstance(config, TransformersCaptionerConfig):
        from pathlib import Path

        return config.model_id or str(Path(config.model_path)), caption_prompt_version()
    if isinstance(config, VLLMCaptionerConfig):
        return config.model_id, fused_prompt_version() if config.fused_label else caption_prompt_version()
    raise TypeError(type(config).__name__)


def label_identity(config: ClassifierConfig) -> tuple[str, str]:
    if isinstance(config, MiniLMClassifierConfig):
        return MINILM, minilm_label_version()
    if isinstance(config, OpenAIClassifierConfig):
        return config.model_id or config.server.model, label_prompt_version()
    if isinstance(config, VLLMClassifierConfig):
        return config.model_id, label_prompt_version()
    if isinstance(config, FusedClassifierConfig):
        # lazy: pulls in PIL
        from prx_data.models.captioning.task import fused_label_version

        return config.model_id, fused_label_version()
    raise TypeError(type(config).__name__)
