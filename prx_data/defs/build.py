"""Assemble the Definitions: every module under ``prx_data/defs`` through the defs-folder loader.

The tree is built from the imported ``prx_data.defs`` package rather than found through
``pyproject.toml`` (``load_from_defs_folder``), so an installed wheel, which ships no
pyproject.toml, loads the same Definitions as a source checkout.
"""

from pathlib import Path

import dagster as dg


def build_defs() -> dg.Definitions:
    """Load the defs folder; resources are built from the settings current at call time."""
    # lazy: the defs package is loaded by the call, not at import
    import prx_data.defs

    package_dir = Path(prx_data.defs.__file__).parent
    return dg.ComponentTree.from_module(defs_module=prx_data.defs, project_root=package_dir.parent).build_defs()
