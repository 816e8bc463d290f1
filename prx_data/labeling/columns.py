"""Classifier results as Arrow columns (:data:`prx_data.schema.LABEL_COLUMNS`), keyed by
``sample_id``."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.labeling.base import Classifier, LabelResult
from prx_data.schema import LABEL_COLUMNS

LABEL_TABLE_SCHEMA = pa.schema([pa.field("sample_id", pa.string(), nullable=False), *LABEL_COLUMNS])


def label_results_table(
    sample_ids: Sequence[str], results: Sequence[LabelResult], model_id: str, label_version: str
) -> pa.Table:
    if len(sample_ids) != len(results):
        raise ValueError(f"{len(sample_ids)} sample ids for {len(results)} results")
    n = len(results)
    return pa.table(
        {
            "sample_id": list(sample_ids),
            "label": [r.label for r in results],
            "label_model": [model_id] * n,
            "label_version": [label_version] * n,
            "label_error": [r.error for r in results],
        },
        schema=LABEL_TABLE_SCHEMA,
    )


def label_table(classifier: Classifier, batch: pa.Table | pa.RecordBatch) -> pa.Table:
    """Label an Arrow batch with ``sample_id`` and ``caption``."""
    results = classifier.label_batch(batch["caption"].to_pylist())
    return label_results_table(
        batch["sample_id"].to_pylist(), results, classifier.model_id, classifier.label_version
    )
