"""The captioner interface every backend implements, and the error vocabulary it writes.

A captioner receives rows (mappings), not bare image bytes, because one backend (``source``)
needs the row's ``source_caption`` and none of them should need a different call shape.

Contract of a result: ``caption`` is not None exactly when the caption is usable. Anything a
guard or a backend flags carries a reason code in ``error`` and no caption, so a downstream
filter on ``caption IS NOT NULL`` can never pick up a truncated or refused caption.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# A row as the caption stage sees it: at least ``image`` (bytes) and, for the source backend,
# ``source_caption``; ``sample_id`` is carried through by the callers, not by the backends.
CaptionRow = Mapping[str, Any]


class CaptionErrorCode:
    """Reason codes written to ``caption_error`` (optionally ``"<code>: <detail>"``)."""

    EMPTY = "empty"
    TRUNCATED = "truncated"
    REFUSAL = "refusal"
    TOO_SHORT = "too_short"
    TOO_LONG = "too_long"
    BAD_IMAGE = "bad_image"
    NO_SOURCE_CAPTION = "no_source_caption"
    HTTP_ERROR = "http_error"  # a 4xx from the server for this row: retrying will not help
    BAD_RESPONSE = "bad_response"  # 2xx, but not a chat completion we can read
    INFERENCE_ERROR = "inference_error"  # the engine failed on this row


@dataclass(frozen=True)
class CaptionResult:
    caption: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.caption is None) == (self.error is None):
            raise ValueError("a CaptionResult has exactly one of caption and error")

    @property
    def ok(self) -> bool:
        return self.error is None


class BackendUnavailable(RuntimeError):
    """The backend cannot be reached at all (as opposed to failing on one row).

    Raised instead of writing an error into every row, so a dead server fails the run loudly
    rather than producing a table full of errors that would all need redoing.
    """


@runtime_checkable
class Captioner(Protocol):
    model_id: str

    # Read-only: backends derive it from their prompt (a property) or fix it (an attribute).
    @property
    def prompt_version(self) -> str: ...

    def caption_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        """One result per row, in order. Per-row problems are results, never exceptions."""
        ...


class BaseCaptioner(ABC):
    """Shared conveniences; a backend implements :meth:`caption_batch` only."""

    model_id: str

    @property
    @abstractmethod
    def prompt_version(self) -> str:
        """Version of the prompt the captions follow (a property or a class attribute)."""

    @abstractmethod
    def caption_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]: ...

    def caption_images(self, images: Sequence[bytes | None]) -> list[CaptionResult]:
        return self.caption_batch([{"image": image} for image in images])

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract: most backends hold nothing
        """Release clients or models; the default holds nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
