"""Code versions: what decides each model-made or export output, read from the settings when the
Definitions are built (not when a module is imported), so a new captioner or prompt version marks
exactly the partitions it changes as stale."""

from __future__ import annotations


def captions_code_version() -> str:
    """caption_model@caption_prompt_version of the configured captioner (what the stage writes
    into each row and compares to find stale rows)."""
    # lazy: pulls in lance, PIL, httpx
    from prx_data.core.settings import get_settings
    from prx_data.models.captioning.factory import parse_captioner_config
    from prx_data.stages.caption_stage import caption_identity

    model, prompt_version = caption_identity(parse_captioner_config(get_settings().captioner))
    return f"{model}@{prompt_version}"


def labels_code_version() -> str:
    # lazy: pulls in lance, httpx, pandas
    from prx_data.core.settings import get_settings
    from prx_data.models.labeling.factory import parse_classifier_config
    from prx_data.stages.label_stage import label_identity

    model, version = label_identity(parse_classifier_config(get_settings().classifier))
    return f"{model}@{version}"


def export_code_version() -> str:
    # lazy: pulls in Dagster
    from prx_data.defs.export.resources import ExportResource
    from prx_data.stages.export_stage import export_version

    return export_version(ExportResource().bucket_config())
