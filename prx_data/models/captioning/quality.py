"""Quality guards: turn a model's raw output into a usable caption or a reason code.

A generated caption is never silently accepted: empty, refusing, truncated, or far outside the
requested length all come back as an error code (see :class:`CaptionErrorCode`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from prx_data.core.reasons import with_detail
from prx_data.models.captioning.base import CaptionErrorCode as E
from prx_data.models.captioning.base import CaptionResult

# Openings of a refusal. Matched only at the start, because a real caption may quote such
# words from text in the image ("a sign reading \"I'm sorry, we're closed\"").
REFUSAL_OPENINGS = (
    "i'm sorry",
    "i am sorry",
    "sorry,",
    "i cannot",
    "i can't",
    "i can not",
    "i'm unable",
    "i am unable",
    "i'm not able",
    "i am not able",
    "i won't",
    "i will not",
    "as an ai",
    "as a language model",
    "i apologize",
    "unfortunately, i",
)

_CLOSERS = "\"'”’)]»"
_FINAL = ".!?…"


class CaptionGuards(BaseModel):
    """Thresholds are deliberately wider than the prompt's 100-200 words: they catch outputs
    that went wrong, not captions that are a little long or short."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_words: int = Field(40, ge=0)
    max_words: int = Field(400, ge=1)
    # A caption that stops mid-sentence was cut off even when the engine did not say so.
    require_final_punctuation: bool = True


def normalize_caption(text: str) -> str:
    """One paragraph, single spaces: the prompt asks for that, models still add line breaks."""
    return " ".join(text.split())


def is_refusal(text: str) -> bool:
    head = text[:80].lower().replace("’", "'")
    return head.startswith(REFUSAL_OPENINGS)


def ends_a_sentence(text: str) -> bool:
    stripped = text.rstrip().rstrip(_CLOSERS)
    return bool(stripped) and stripped[-1] in _FINAL


def word_count(text: str) -> int:
    return len(text.split())


def judge_caption(raw: str | None, *, finish_reason: str | None = None, guards: CaptionGuards | None = None) -> CaptionResult:
    """Judge one generated caption.

    ``finish_reason`` is the engine's ("stop", "length", ...); ``"length"`` means the
    generation hit ``max_tokens`` and the caption is truncated whatever its last character.
    """
    guards = guards or CaptionGuards()
    text = normalize_caption(raw or "")
    if not text:
        return CaptionResult(error=E.EMPTY)
    if is_refusal(text):
        return CaptionResult(error=with_detail(E.REFUSAL, text[:60]))
    if finish_reason == "length":
        return CaptionResult(error=with_detail(E.TRUNCATED, "max_tokens"))
    if guards.require_final_punctuation and not ends_a_sentence(text):
        return CaptionResult(error=with_detail(E.TRUNCATED, "no final punctuation"))
    words = word_count(text)
    if words < guards.min_words:
        return CaptionResult(error=with_detail(E.TOO_SHORT, f"{words} words"))
    if words > guards.max_words:
        return CaptionResult(error=with_detail(E.TOO_LONG, f"{words} words"))
    return CaptionResult(caption=text)


def judge_source_caption(raw: str | None) -> CaptionResult:
    """Source captions are short alt texts: no length or punctuation guard, only presence."""
    if raw is None:
        return CaptionResult(error=E.NO_SOURCE_CAPTION)
    text = normalize_caption(raw)
    if not text:
        return CaptionResult(error=E.EMPTY)
    return CaptionResult(caption=text)
