"""The trainer-side MDS loader (``loader.py``), over mosaicml-streaming and torch.

These come with the ``train`` extra, not with the pipeline's install: the code location, the CLI
and the Ray workers never import this package. Importing it without them fails here, naming the
extra, rather than deep inside the loader's imports.
"""

from __future__ import annotations

import importlib.util


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None, or a finder that refuses it
        return False


_MISSING = [name for name in ("streaming", "torch") if not _installed(name)]
if _MISSING:
    raise ImportError(
        f"prx_data.training (the training loader) needs {' and '.join(_MISSING)}, which the pipeline's own "
        "install leaves out: pip install 'prx-data[train]'",
        name=_MISSING[0],
    )
