"""What the CPU stages' Ray tasks import on a worker, imported ahead of them by the command's
warm-up (``defs.cluster.start_stage_workers``): a fresh worker spends about a second on it."""

from __future__ import annotations


def import_stage_code() -> None:
    import prx_data.stages.export_stage  # noqa: F401
    import prx_data.stages.label_stage  # noqa: F401
    import prx_data.stages.phash_stage  # noqa: F401


__all__ = ["import_stage_code"]
