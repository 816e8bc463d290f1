"""Dagster entry point: everything under ``prx_data/defs`` is loaded by the defs-folder loader."""

from pathlib import Path

import dagster as dg

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def build_defs() -> dg.Definitions:
    """Load the defs folder; resources are built from the settings current at call time."""
    return dg.load_from_defs_folder(path_within_project=PROJECT_ROOT)


defs = build_defs()
