"""Any :class:`VLMTask` on the vLLM engine through Ray Data (:mod:`vllm_engine`): the ``vllm``
backend of every model stage.

:meth:`VLLMTaskBackend.run_dataset` is the way to use it: the stage streams its rows through it.
:meth:`~VLLMTaskBackend.run_batch` works too, but each call runs a small Ray Data job that starts
the engine replicas again (minutes for an 8B model): only for tests and tiny batches.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from prx_data.core.reasons import with_detail
from prx_data.models.inference.backend import ErrorCode, ModelBackend, R, Row
from prx_data.models.inference.columns import DerivedColumns

if TYPE_CHECKING:
    import ray.data


class VLLMTaskBackend(ModelBackend[R]):
    # The stage's result class (its ``of(value, error)`` builds one).
    result_type: ClassVar[Any]
    columns: ClassVar[DerivedColumns]
    # The row columns the engine's rows carry besides sample_id.
    dataset_inputs: ClassVar[tuple[str, ...]]

    @abstractmethod
    def run_dataset(self, ds: ray.data.Dataset) -> ray.data.Dataset:
        """Lazily run the task over ``ds``; nothing runs until the result is consumed."""

    def run_batch(self, rows: Sequence[Row]) -> list[R]:
        import ray.data

        items = [{"sample_id": str(i), **{name: row.get(name) for name in self.dataset_inputs}} for i, row in enumerate(rows)]
        if not items:
            return []
        out = {r["sample_id"]: r for r in self.run_dataset(ray.data.from_items(items)).take_all()}
        c, results = self.columns, []
        for item in items:
            r = out.get(item["sample_id"])
            if r is None:
                results.append(self.result_type.of(error=with_detail(ErrorCode.INFERENCE_ERROR, "row lost")))
            elif r[c.error] is not None:
                results.append(self.result_type.of(error=r[c.error]))
            else:
                results.append(self.result_type.of(r[c.value]))
        return results


__all__ = ["VLLMTaskBackend"]
