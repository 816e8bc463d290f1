"""The captioner: the model backend of the caption stage, its result and its reason codes.

A captioner receives rows (mappings), not bare image bytes, because one backend (``source``)
needs the row's ``source_caption`` and none of them should need a different call shape. A result
holds a usable caption or a reason code (:class:`prx_data.models.inference.backend.ModelResult`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prx_data.models.inference.backend import ErrorCode, ModelBackend, ModelResult, Row

# A row as the caption stage sees it: at least ``image`` (bytes) and, for the source backend,
# ``source_caption``; ``sample_id`` is carried through by the callers, not by the backends.
CaptionRow = Row


class CaptionErrorCode(ErrorCode):
    """Reason codes written to ``caption_error`` (optionally ``"<code>: <detail>"``)."""

    EMPTY = "empty"
    TRUNCATED = "truncated"
    REFUSAL = "refusal"
    TOO_SHORT = "too_short"
    TOO_LONG = "too_long"
    BAD_IMAGE = "bad_image"
    NO_SOURCE_CAPTION = "no_source_caption"


@dataclass(frozen=True)
class CaptionResult(ModelResult):
    value_field = "caption"
    caption: str | None = None


class BaseCaptioner(ModelBackend[CaptionResult]):
    """A backend implements :meth:`run_batch`; its ``version`` is the prompt's
    (``caption_prompt_version``)."""

    def caption_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        return self.run_batch(rows)

    def caption_images(self, images: Sequence[bytes | None]) -> list[CaptionResult]:
        return self.caption_batch([{"image": image} for image in images])
