"""The public name trainers import (``from prx_data.loader import make_loader``); the loader lives
in :mod:`prx_data.training.loader`. Importing this imports ``streaming`` (and torch),
from the ``train`` extra: ``pip install 'prx-data[train]'``."""

from prx_data.training.loader import make_loader, published_buckets  # noqa: F401
