"""The caption_labels stage: visual / text / nsfw from the caption alone.

CPU backends (minilm, openai) take row chunks, here or as Ray tasks; the vLLM backend streams the
captions through a Ray Data LLM processor (``stages.model_stage``); ``fused`` runs no model.
"""

from __future__ import annotations

from collections import Counter

import lance
import pyarrow as pa

from prx_data.core.counts import value_counter
from prx_data.core.filters import STATUS_OK, all_of, is_set
from prx_data.core.lance_io import SCAN_ROWS
from prx_data.core.ray_tasks import Executor
from prx_data.core.schema import LABEL_COLUMNS
from prx_data.models.derived_columns import CAPTION, LABEL
from prx_data.models.labeling.base import BaseClassifier
from prx_data.models.labeling.config import ClassifierConfig, FusedClassifierConfig, VLLMClassifierConfig
from prx_data.models.labeling.factory import CLASSIFIERS
from prx_data.models.labeling.fused import FusedLabels
from prx_data.models.labeling.label_columns import label_results_table, with_label_score
from prx_data.stages.column_spec import ColumnStage
from prx_data.stages.model_stage import ModelStage, Reads
from prx_data.stages.versions import label_identity


class LabelStage(ModelStage[ClassifierConfig, BaseClassifier]):
    columns = LABEL
    identity = staticmethod(label_identity)
    results_table = staticmethod(label_results_table)
    backends = CLASSIFIERS

    def reads(self, config: ClassifierConfig) -> Reads:
        return Reads() if isinstance(config, FusedClassifierConfig) else Reads((CAPTION.value,))

    def placement(self, config: ClassifierConfig, executor: Executor, task_resources: dict[str, float] | None) -> Executor:
        return "local" if isinstance(config, FusedClassifierConfig) else executor  # no model: nothing for a worker

    def stream_chunk_rows(self, config: ClassifierConfig, chunk_rows: int) -> int:
        assert isinstance(config, VLLMClassifierConfig)
        return config.chunk_rows

    def finish_batch(self, batch: pa.Table) -> pa.Table:
        return with_label_score(batch)

    def setup(self, config: ClassifierConfig) -> BaseClassifier:
        if isinstance(config, FusedClassifierConfig):
            # The captioner's label version, which labeling does not import.
            return FusedLabels(config, self.identity(config)[1])
        return super().setup(config)

    def column_stage(self, config: ClassifierConfig) -> ColumnStage:
        model_id, version = self.identity(config)
        return ColumnStage(
            name=self.name,
            columns=LABEL_COLUMNS,
            current={LABEL.model: model_id, LABEL.version: version},
            eligible=all_of(STATUS_OK, is_set(CAPTION.value)),
            redo_if_set=(LABEL.error,),
            # A label follows its caption; older code nulled the label of every re-captioned row,
            # so labels made before the fingerprint existed are adopted, not redone.
            inputs=(CAPTION.value,),
        )


CAPTION_LABELS = LabelStage()
label_stage = CAPTION_LABELS.column_stage
compute_labels = CAPTION_LABELS.compute


def label_counts(table_uri: str, storage_options: dict | None = None) -> dict[str, int]:
    ds = lance.dataset(table_uri, storage_options=storage_options)
    out: Counter[str] = Counter()
    for batch in ds.to_batches(columns=["label"], filter="label IS NOT NULL", batch_size=SCAN_ROWS):
        out.update(value_counter(batch.column("label")))
    return dict(sorted(out.items()))


__all__ = ["CAPTION_LABELS", "LabelStage", "compute_labels", "label_counts", "label_identity", "label_stage"]
