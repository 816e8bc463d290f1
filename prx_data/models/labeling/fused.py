"""The ``fused`` classifier: no model. The captioner wrote the labels with the captions
(``VLLMCaptionerConfig.fused_label``), so the rows still to label were captioned before that:
each gets ``label_error='no_fused_label'`` (re-caption them to label them)."""

from __future__ import annotations

from collections.abc import Sequence

from prx_data.models.inference.backend import Row
from prx_data.models.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
from prx_data.models.labeling.config import FusedClassifierConfig


class FusedLabels(BaseClassifier):
    def __init__(self, config: FusedClassifierConfig, version: str) -> None:
        """``version``: the fused prompt's label version (the captioner's, which labeling does
        not import: the label stage passes it)."""
        self.model_id = config.model_id
        self._version = version

    @property
    def version(self) -> str:
        return self._version

    def run_batch(self, rows: Sequence[Row]) -> list[LabelResult]:
        return [LabelResult(error=LabelErrorCode.NO_FUSED_LABEL)] * len(rows)
