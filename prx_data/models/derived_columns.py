"""The columns of the two model stages, named once: the caption stage's and the label stage's
(the fused caption request writes both, so both sit below captioning and labeling)."""

from __future__ import annotations

from prx_data.models.inference.columns import DerivedColumns

CAPTION = DerivedColumns("caption", "caption_model", "caption_prompt_version", "caption_error")
LABEL = DerivedColumns("label", "label_model", "label_version", "label_error")
