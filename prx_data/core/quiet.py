"""Known-benign log noise, silenced where it starts; real warnings stay.

Lance logs "No existing dataset at <uri>, it will be created" at WARN (target
``lance::dataset::write::insert``) on every first write of a table, which is the normal way each
table of this pipeline comes to exist. Lance reads its Rust log filter (``LANCE_LOG``, env_logger
syntax) once, when the extension loads, so the filter is set before anything imports lance; an
explicit ``LANCE_LOG`` from the user is left alone. Every other Lance warning still shows.
"""

from __future__ import annotations

import os

LANCE_LOG_FILTER = "warn,lance::dataset::write::insert=error"


def quiet_known_warnings() -> None:
    os.environ.setdefault("LANCE_LOG", LANCE_LOG_FILTER)


def quiet_ray_env() -> dict[str, str]:
    """Environment for a Ray and the processes that talk to it: no usage-stats prompt, no uv
    runtime-env hook. Auth is left to the cluster's own settings (``core.ray_auth`` for the Rays
    this project starts)."""
    return {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
