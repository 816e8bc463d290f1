"""The caption-label classifier: the model backend of the label stage, its result and its
reason codes.

A classifier reads captions only, never images, and puts each in one of
:data:`prx_data.core.schema.LABELS`. As for captions, ``label`` is not None exactly when it is
usable; otherwise ``error`` holds a reason code (optionally ``"code: detail"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prx_data.core.schema import LABELS
from prx_data.models.inference.backend import ErrorCode, ModelBackend, ModelResult


class LabelErrorCode(ErrorCode):
    NO_CAPTION = "no_caption"  # nothing to classify (caption missing or blank)
    INVALID_LABEL = "invalid_label"  # the model answered something outside LABELS
    # Classifier "fused": a row captioned before the captioner wrote labels (re-caption it).
    NO_FUSED_LABEL = "no_fused_label"


@dataclass(frozen=True)
class LabelResult(ModelResult):
    value_field = "label"
    label: str | None = None
    # How sure the backend is of ``label`` (0..1), where it can say; stored as ``label_score``.
    score: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.label is not None and self.label not in LABELS:
            raise ValueError(f"label {self.label!r} is not one of {LABELS}")


class BaseClassifier(ModelBackend[LabelResult]):
    """A backend implements :meth:`run_batch` (rows holding ``caption``); its ``version`` is the
    labelling's (prompt or model), recorded as ``label_version``."""

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        return self.run_batch([{"caption": caption} for caption in captions])
