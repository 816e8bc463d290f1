"""The captions stage: a caption per usable row from the configured captioner.

CPU backends (source, openai, transformers) take row chunks, here or as Ray tasks; the vLLM
backend streams the rows through a Ray Data LLM processor on GPU replicas (``stages.model_stage``).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import lance
import pyarrow as pa

from prx_data.core.counts import word_histogram
from prx_data.core.lance_io import scan_text
from prx_data.core.ray_tasks import Executor
from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS, input_fingerprint_field
from prx_data.models.captioning.base import BaseCaptioner
from prx_data.models.captioning.caption_columns import caption_results_table
from prx_data.models.captioning.config import CaptionerConfig, SourceCaptionerConfig, VLLMCaptionerConfig
from prx_data.models.captioning.factory import CAPTIONERS
from prx_data.models.derived_columns import CAPTION
from prx_data.stages.column_spec import ColumnStage
from prx_data.stages.model_stage import ModelStage, Reads
from prx_data.stages.versions import caption_identity


class CaptionStage(ModelStage[CaptionerConfig, BaseCaptioner]):
    columns = CAPTION
    identity = staticmethod(caption_identity)
    results_table = staticmethod(caption_results_table)
    backends = CAPTIONERS
    chunk_rows = 64

    def reads(self, config: CaptionerConfig) -> Reads:
        if self.streams(config):
            return Reads(("source",), images=True)  # the source picks the image budget
        # The source captioner reads the source caption; the models read the image alone.
        return Reads(("source_caption",), images=not isinstance(config, SourceCaptionerConfig))

    def placement(self, config: CaptionerConfig, executor: Executor, task_resources: dict[str, float] | None) -> Executor:
        if executor == "auto" and isinstance(config, SourceCaptionerConfig) and not task_resources:
            return "local"  # the source backend copies a text column: Ray tasks would cost more than the copy
        return executor

    def column_stage(self, config: CaptionerConfig) -> ColumnStage:
        model_id, prompt_version = self.identity(config)
        inputs = caption_inputs(config)
        # Older code never redid a source caption after a sidecar edit: redo those (no model, cheap).
        # A model's caption followed its image already (a new image replaces the row): adopt it.
        upgrade: Literal["adopt", "redo"] = "redo" if isinstance(config, SourceCaptionerConfig) else "adopt"
        current = {CAPTION.model: model_id, CAPTION.version: prompt_version}
        if isinstance(config, VLLMCaptionerConfig) and config.fused_label:
            # The fused request writes the label with the caption: nothing to invalidate.
            return ColumnStage(
                name=self.name,
                columns=pa.schema([*CAPTION_COLUMNS, *LABEL_COLUMNS]),
                current=current,
                redo_if_set=(CAPTION.error,),
                inputs=inputs,
                upgrade=upgrade,
                output_fingerprints={input_fingerprint_field("label").name: (CAPTION.value,)},
            )
        # A model's error may pass on a retry (a timeout, a refusal); the source backend's verdict
        # is a function of the source caption, whose fingerprint already redoes a changed row, so
        # a row without a usable source caption is not retried on every run.
        redo: tuple[str, ...] = () if isinstance(config, SourceCaptionerConfig) else (CAPTION.error,)
        return ColumnStage(
            name=self.name,
            columns=CAPTION_COLUMNS,
            current=current,
            redo_if_set=redo,
            invalidates=tuple(f.name for f in LABEL_COLUMNS),
            inputs=inputs,
            upgrade=upgrade,
        )


def caption_inputs(config: CaptionerConfig) -> tuple[str, ...]:
    """The columns a backend's caption is made from: the ``source`` captioner reads the source
    caption; the models read the image alone."""
    if isinstance(config, SourceCaptionerConfig):
        return ("image_sha256", "source_caption")
    return ("image_sha256",)


CAPTIONS = CaptionStage()
caption_stage = CAPTIONS.column_stage
compute_captions = CAPTIONS.compute


def caption_word_counts(table_uri: str, storage_options: dict | None = None) -> Counter[int]:
    """{words: captions} over the table's captions, scanned in batches (see core.counts)."""
    ds = lance.dataset(table_uri, storage_options=storage_options)
    histogram: Counter[int] = Counter()
    for batch in scan_text(ds, ["caption"], filter="caption IS NOT NULL"):
        histogram.update(word_histogram(batch.column("caption")))
    return histogram


__all__ = ["CAPTIONS", "CaptionStage", "caption_identity", "caption_inputs", "caption_stage", "caption_word_counts", "compute_captions"]
