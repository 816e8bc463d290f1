"""The caption-label classifier interface and its error vocabulary.

A classifier reads captions only, never images, and puts each in one of
:data:`prx_data.core.schema.LABELS`. As for captions, ``label`` is not None exactly when it is usable;
otherwise ``error`` holds a reason code (optionally ``"code: detail"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from prx_data.core.schema import LABELS


class LabelErrorCode:
    NO_CAPTION = "no_caption"  # nothing to classify (caption missing or blank)
    INVALID_LABEL = "invalid_label"  # the model answered something outside LABELS
    HTTP_ERROR = "http_error"
    BAD_RESPONSE = "bad_response"
    INFERENCE_ERROR = "inference_error"


@dataclass(frozen=True)
class LabelResult:
    label: str | None = None
    error: str | None = None
    # How sure the backend is of ``label`` (0..1), where it can say; stored as ``label_score``.
    score: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.label is None) == (self.error is None):
            raise ValueError("a LabelResult has exactly one of label and error")
        if self.label is not None and self.label not in LABELS:
            raise ValueError(f"label {self.label!r} is not one of {LABELS}")


@runtime_checkable
class Classifier(Protocol):
    model_id: str

    # Read-only: backends derive it from their prompt or model (a property) or fix it (an attribute).
    @property
    def label_version(self) -> str: ...

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        """One result per caption, in order; per-caption problems are results, not raises."""
        ...


class BaseClassifier(ABC):
    model_id: str

    @property
    @abstractmethod
    def label_version(self) -> str:
        """Version of the labelling (prompt or model) the labels follow."""

    @abstractmethod
    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]: ...

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract: most backends hold nothing
        """Release clients or models; the default holds nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
