"""prx-data: build pre-training corpora for text-to-image models.

Plain modules (schema, readers, imaging, export, loader, captioning) import without Dagster so
Ray workers can use them; Dagster definitions live under ``prx_data.defs``.
"""

__version__ = "0.1.0"

from prx_data.core.quiet import quiet_known_warnings as _quiet

_quiet()  # before anything imports lance (see prx_data/core/quiet.py)
