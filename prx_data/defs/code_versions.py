"""Code versions: what decides each model-made or export output, read from the settings when the
Definitions are built (not when a module is imported), so a new captioner or prompt version marks
exactly the partitions it changes as stale.

No Dagster here: ``prx-data run`` compares :func:`asset_code_versions` with its records to skip a
source that has nothing to do before it loads the Definitions or Dagster itself.
"""

from __future__ import annotations

# Bump when ingest semantics change (schema, probe rules), so the UI shows partitions as stale.
INGEST_CODE_VERSION = "ingest-v2"  # v2: contained reads, format allow-list, typed records, structural truncation


def captions_code_version() -> str:
    """caption_model@caption_prompt_version of the configured captioner (what the stage writes
    into each row and compares to find stale rows)."""
    # lazy: pulls in PIL, httpx
    from prx_data.core.settings import get_settings
    from prx_data.models.captioning.factory import parse_captioner_config
    from prx_data.stages.versions import caption_identity

    model, prompt_version = caption_identity(parse_captioner_config(get_settings().captioner))
    return f"{model}@{prompt_version}"


def labels_code_version() -> str:
    # lazy: pulls in httpx, numpy
    from prx_data.core.settings import get_settings
    from prx_data.models.labeling.factory import parse_classifier_config
    from prx_data.stages.versions import label_identity

    model, version = label_identity(parse_classifier_config(get_settings().classifier))
    return f"{model}@{version}"


def phashes_code_version() -> str:
    """The hash's version and the colour-space reading's: the asset writes both."""
    # lazy: pulls in numpy, PIL
    from prx_data.imaging.colour import COLOUR_VERSION
    from prx_data.imaging.phash import PHASH_VERSION

    return f"{PHASH_VERSION}+{COLOUR_VERSION}"


def export_code_version() -> str:
    """Of the default bucket layout (``ExportResource``'s defaults are ``BucketConfig``'s), and
    the colour conversion (which changes only profiled rows' keys: ``stages.export_plan``)."""
    # lazy: pulls in PIL
    from prx_data.imaging.buckets import BucketConfig
    from prx_data.imaging.colour import COLOUR_VERSION
    from prx_data.stages.versions import export_version

    return f"{export_version(BucketConfig())}+{COLOUR_VERSION}"


def asset_code_versions() -> dict[str, str]:
    """The code version of every asset that has one, by asset key, as the Definitions give them
    (prx_data_tests/automation/test_policy.py checks that they agree)."""
    return {
        "raw_samples": INGEST_CODE_VERSION,
        "phashes": phashes_code_version(),
        "captions": captions_code_version(),
        "caption_labels": labels_code_version(),
        "mds_shards": export_code_version(),
    }
