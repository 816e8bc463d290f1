"""Export settings shared by mds_shards and skip_lists (the dedup grid is the bucket grid)."""

import dagster as dg
from pydantic import Field

from prx_data.core.settings import EXCLUDE_LABELS
from prx_data.export.mds_writer import MdsWriterConfig
from prx_data.imaging.buckets import BucketConfig


class ExportResource(dg.ConfigurableResource):
    """How the export is shaped: resolution tiers and aspect buckets, shard size, and which
    labels and uncaptioned rows are left out of training (skip lists, drop reasons)."""

    tiers: list[int] = Field(default_factory=lambda: [512, 1024, 2048, 4096])
    max_upscale: float = 4 / 3
    ar_min: float = 0.5
    ar_max: float = 2.0
    shapes_per_tier: int = 13
    multiple: int = 16
    shard_size_mb: int = 128
    exclude_labels: list[str] = Field(default_factory=lambda: list(EXCLUDE_LABELS))
    require_caption: bool = True
    # Longer captions drop their sample as ``caption_too_long`` (stages.export_stage).
    max_caption_chars: int = Field(default=20_000, ge=1)

    def bucket_config(self) -> BucketConfig:
        return BucketConfig(
            tiers=tuple(self.tiers),
            max_upscale=self.max_upscale,
            ar_min=self.ar_min,
            ar_max=self.ar_max,
            shapes_per_tier=self.shapes_per_tier,
            multiple=self.multiple,
        )

    def writer_config(self) -> MdsWriterConfig:
        return MdsWriterConfig(size_limit=self.shard_size_mb * 1024 * 1024)
