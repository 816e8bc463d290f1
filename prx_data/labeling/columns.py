"""Classifier results as Arrow columns (:data:`prx_data.schema.LABEL_COLUMNS`), keyed by
``sample_id``."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.captioning.columns import results_table
from prx_data.captioning.resume import LABEL
from prx_data.labeling.base import Classifier, LabelResult
from prx_data.schema import LABEL_COLUMNS

LABEL_TABLE_SCHEMA = pa.schema([pa.field("sample_id", pa.string(), nullable=False), *LABEL_COLUMNS])


def label_results_table(
    sample_ids: Sequence[str], results: Sequence[LabelResult], model_id: str, label_version: str
) -> pa.Table:
    return results_table(
        LABEL, LABEL_TABLE_SCHEMA, sample_ids, [r.label for r in results], [r.error for r in results], model_id, label_version
    )


def label_table(classifier: Classifier, batch: pa.Table | pa.RecordBatch) -> pa.Table:
    """Label an Arrow batch with ``sample_id`` and ``caption``."""
    results = classifier.label_batch(batch["caption"].to_pylist())
    return label_results_table(
        batch["sample_id"].to_pylist(), results, classifier.model_id, classifier.label_version
    )
