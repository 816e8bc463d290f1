"""Per-stage timings of a finished Ray Data run, for sizing the CPU stages around the engine.

Ray Data's own stats (``Dataset.stats()``) say per operator how long it ran, its summed remote
wall time and its throughput: a starved stage shows as a long run with little wall time of its
own. When ``PRX_STAGE_TIMINGS`` names a file, the VLM stages append one summary there per run
(the CPU engine test records it; a GPU run can set it too). Unset: nothing is computed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ray.data

TIMINGS_VAR = "PRX_STAGE_TIMINGS"
_KEPT = ("Operator ", "* Remote wall time", "* Ray Data throughput", "Dataset throughput")


def summarize(stats: str) -> str:
    """The lines of ``Dataset.stats()`` that size stages: each operator's run time, its wall
    time and its throughput (Ray 2.60's wording)."""
    return "\n".join(line.strip() for line in stats.splitlines() if line.strip().startswith(_KEPT))


def record_stage_timings(ds: ray.data.Dataset, label: str) -> None:
    path = os.environ.get(TIMINGS_VAR)
    if not path:
        return
    try:
        text = summarize(ds.stats())
    except Exception as exc:  # timings are a diagnostic: never fail the stage for them
        text = f"(no stats: {exc!r})"
    with open(path, "a") as f:
        f.write(f"== {label}\n{text}\n")
