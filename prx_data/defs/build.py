"""Assemble the Definitions: every module under ``prx_data/defs`` through the defs-folder loader.

The tree is built from the imported ``prx_data.defs`` package rather than found through
``pyproject.toml`` (``load_from_defs_folder``), so an installed wheel, which ships no
pyproject.toml, loads the same Definitions as a source checkout.
"""

import warnings
from pathlib import Path

import dagster as dg


def build_defs() -> dg.Definitions:
    """Load the defs folder; resources are built from the settings current at call time.

    Only the defs folder is built, not the tree's root: the root adds a catalogue of every
    component type installed in the environment (entry-point scan, JSON schema and sample YAML
    per type, for ``dg``'s scaffolding) and UI-managed components. This project declares neither,
    and the catalogue cost ~0.25 s of every code-location load (run workers, daemon ticks, UI
    reloads). The tree stays attached so the UI can still show it.
    """
    quiet_dagster_notes()
    # lazy: the defs package is loaded by the call, not at import
    import prx_data.defs

    package_dir = Path(prx_data.defs.__file__).parent
    tree = dg.ComponentTree.from_module(defs_module=prx_data.defs, project_root=package_dir.parent)
    return dg.Definitions.merge(tree.build_defs(package_dir), dg.Definitions(component_tree=tree))


def quiet_dagster_notes() -> None:
    """Silence Dagster's notes on its preview and beta APIs in this process.

    The defs folder, partitioned checks, observable sources and sensor owners are used on
    purpose; their notes would repeat in every process that loads the code location (each run,
    each reload), some when Dagster resolves the Definitions lazily, after this module returns,
    so the filter is the process's, not a ``catch_warnings`` block's."""
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)
