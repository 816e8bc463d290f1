"""The four columns a VLM stage writes, named once: value, model, version, error.

Which rows a stage redoes is decided in one place for every stage, by
:class:`prx_data.stages.column_stage.ColumnStage` (its pending filter, pushed down into the Lance
scan): a row with no value, a value made by another model or version, or an error.
"""

from __future__ import annotations

from typing import NamedTuple


class DerivedColumns(NamedTuple):
    value: str
    model: str
    version: str
    error: str


CAPTION = DerivedColumns("caption", "caption_model", "caption_prompt_version", "caption_error")
LABEL = DerivedColumns("label", "label_model", "label_version", "label_error")
