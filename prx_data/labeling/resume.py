"""Which rows still need a label: none yet, another model or label version, or an error."""

from __future__ import annotations

from prx_data.captioning.resume import LABEL, needs_redo, redo_filter


def needs_label(data, model_id: str, label_version: str):
    """A bool for a row mapping; a numpy bool mask for an Arrow table or record batch."""
    return needs_redo(data, LABEL, model_id, label_version)


def needs_label_filter(model_id: str, label_version: str) -> str:
    """The same test as a Lance scan filter (the label columns must exist)."""
    return redo_filter(LABEL, model_id, label_version)
