"""The ``source`` backend: keep the caption the source dataset shipped.

Recorded honestly as ``caption_model="source"`` so these rows are re-captioned when a VLM
backend runs later (another model, so the caption stage's pending filter picks them).
"""

from __future__ import annotations

from collections.abc import Sequence

from prx_data.models.captioning.base import BaseCaptioner, CaptionResult, CaptionRow
from prx_data.models.captioning.config import SourceCaptionerConfig
from prx_data.models.captioning.quality import judge_source_caption

SOURCE_MODEL_ID = "source"
SOURCE_PROMPT_VERSION = "source"


class SourceCaptioner(BaseCaptioner):
    model_id = SOURCE_MODEL_ID
    version = SOURCE_PROMPT_VERSION

    def __init__(self, config: SourceCaptionerConfig | None = None) -> None:
        self.config = config or SourceCaptionerConfig()

    def run_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        return [judge_source_caption(row.get("source_caption")) for row in rows]
