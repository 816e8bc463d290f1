"""The one backend interface of every model stage, its typed results and reason codes.

A backend receives rows (mappings holding the stage's input columns) and answers one result per
row, in order. A result holds a value or the reason there is none, never both, so a downstream
filter on ``<value> IS NOT NULL`` never picks up a truncated or refused answer. Per-row problems
are results; a backend that cannot be reached at all raises :class:`BackendUnavailable`.

A backend may hold clients or models: whoever builds it closes it (``close()``, or ``with``);
``stages.model_stage`` does, once per worker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import ray.data

# A row as a model stage hands it to its backend: the stage's input columns by name.
Row = Mapping[str, Any]


class ErrorCode:
    """Reason codes every backend may write to its stage's error column (``"<code>: <detail>"``)."""

    HTTP_ERROR = "http_error"  # a 4xx from the server for this row: retrying will not help
    BAD_RESPONSE = "bad_response"  # 2xx, but not a chat completion we can read
    INFERENCE_ERROR = "inference_error"  # the engine failed on this row


class BackendUnavailable(RuntimeError):
    """The backend cannot be reached at all (as opposed to failing on one row).

    Raised instead of writing an error into every row, so a dead server fails the run loudly
    rather than producing a table full of errors that would all need redoing.
    """


@dataclass(frozen=True, kw_only=True)  # the value field comes first, as the subclasses name it
class ModelResult:
    """One row's answer: exactly one of its value and :attr:`error`. A stage's result is a
    frozen dataclass that adds its value field, named by ``value_field`` (``caption``, ``label``)."""

    value_field: ClassVar[str]
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.error is None):
            raise ValueError(f"a {type(self).__name__} has exactly one of {self.value_field} and error")

    @property
    def value(self) -> Any:
        return getattr(self, self.value_field)

    @classmethod
    def of(cls, value: Any = None, error: str | None = None) -> Self:
        """The result holding ``value`` or ``error``, whatever the value field is called."""
        return cls(**{cls.value_field: value, "error": error})

    @property
    def ok(self) -> bool:
        return self.error is None


R = TypeVar("R", bound=ModelResult)


class ModelBackend(ABC, Generic[R]):
    """A model behind a stage: ``model_id`` and :attr:`version` are what the stage records in
    each row (and compares to find stale rows); :meth:`run_batch` answers a batch of rows."""

    model_id: str

    @property
    @abstractmethod
    def version(self) -> str:
        """Version of what decides the answers (the prompt, the model's own version)."""

    @abstractmethod
    def run_batch(self, rows: Sequence[Row]) -> list[R]:
        """One result per row, in order. Per-row problems are results, never exceptions."""

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract: most backends hold nothing
        """Release clients or models; the default holds nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@runtime_checkable
class DatasetBackend(Protocol):
    """A backend that streams a Ray Dataset (rows with ``sample_id`` and the stage's inputs)
    into rows of its stage's columns, lazily: the way engines on GPU replicas run."""

    def run_dataset(self, ds: ray.data.Dataset) -> ray.data.Dataset: ...
