"""A VLM task: what a model stage asks a model, whichever backend asks it.

A :class:`VLMTask` says what a stage asks a model and how it reads the answer: the request for a
row (chat messages + sampling parameters), the quality judgement of the generated text, and the
columns it writes (value, model, version, error: :class:`DerivedColumns`, which is also what
resume keys on). Backends (vLLM on Ray, an OpenAI-compatible server) only move requests and
answers; captions, labels and the fused caption+label are three tasks.

Plain module: no Ray, no vLLM (Ray workers and the Dagster side both import it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prx_data.models.inference.columns import DerivedColumns


class PrepError(ValueError):
    """A row the task cannot build a request for; ``code`` lands in the error column."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class VLMRequest:
    messages: list[dict]
    sampling: dict[str, Any]
    # Per-request processor arguments (vLLM ``mm_processor_kwargs``): the image-token budget.
    mm_processor_kwargs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Judged:
    """A task's reading of one answer: exactly one of value and error, plus columns of other
    stages the same answer fills (the fused task's label)."""

    value: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class VLMTask(ABC):
    columns: DerivedColumns
    model_id: str
    version: str
    # Row columns the request is built from (besides sample_id).
    inputs: tuple[str, ...]
    # Other columns the task writes (the fused task's label columns); None on failed rows.
    extra_columns: tuple[str, ...] = ()

    @abstractmethod
    def request(self, row: Mapping[str, Any]) -> VLMRequest:
        """The request for a row; raises :class:`PrepError` when the row cannot be asked."""

    @abstractmethod
    def placeholder(self) -> VLMRequest:
        """A one-token request with the same shape as a real one, for rows that failed prep:
        rows cannot be dropped inside a Ray LLM processor, and one shape keeps the columns
        typed (no pickled objects between stages)."""

    @abstractmethod
    def judge(self, text: str | None, finish_reason: str | None) -> Judged: ...

    def row(self, sample_id: Any, judged: Judged) -> dict[str, Any]:
        c = self.columns
        out = {
            "sample_id": sample_id,
            c.value: judged.value,
            c.model: self.model_id,
            c.version: self.version,
            c.error: judged.error,
        }
        for name in self.extra_columns:
            out[name] = judged.extra.get(name)
        return out

    @property
    def output_keys(self) -> tuple[str, ...]:
        c = self.columns
        return ("sample_id", c.value, c.model, c.version, c.error, *self.extra_columns)
