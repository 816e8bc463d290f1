"""The one place for storage paths: where every table, stream and sidecar lives."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from prx_data.core.settings import Settings


def join(root: str, *parts: str) -> str:
    """Join for local paths and object-store URIs alike (always '/')."""
    return posixpath.join(root.rstrip("/"), *parts)


def unit_manifest_uri(table_uri: str) -> str:
    """``.../sources/<source>.lance`` -> ``.../sources/<source>.units.lance``: which input
    objects the table holds, by signature (``prx_data.ingest.plan.unit_manifest``)."""
    return f"{table_uri.rstrip('/').removesuffix('.lance')}.units.lance"


def superseded_uri(exports_uri: str) -> str:
    """``.../exports/<source>.lance`` -> ``.../exports/<source>.superseded.lance``."""
    return f"{exports_uri.rstrip('/').removesuffix('.lance')}.superseded.lance"


@dataclass(frozen=True)
class StoragePaths:
    lance_root: str
    mds_root: str

    @classmethod
    def from_settings(cls, settings: Settings) -> StoragePaths:
        return cls(lance_root=settings.lance_root, mds_root=settings.mds_root)

    # Lance tables -------------------------------------------------------------------------
    def raw_table(self, source: str) -> str:
        return join(self.lance_root, "sources", f"{source}.lance")

    def unit_manifest(self, source: str) -> str:
        """Beside the source's table: the signature of every input object it was read from."""
        return unit_manifest_uri(self.raw_table(source))

    def exports_table(self, source: str) -> str:
        """Where each sample of a source landed in MDS, or why it was dropped."""
        return join(self.lance_root, "exports", f"{source}.lance")

    def superseded_table(self, source: str) -> str:
        """Placements in kept shards that an incremental export replaced (skipped as 'superseded')."""
        return superseded_uri(self.exports_table(source))

    def optout_audit_table(self) -> str:
        return join(self.lance_root, "optout_audit.lance")

    def optout_withdrawals_table(self) -> str:
        return join(self.lance_root, "optout_withdrawals.lance")

    def optout_samples_table(self) -> str:
        return join(self.lance_root, "optout_samples.lance")

    def optout_builds_table(self) -> str:
        """Which skip-list build excluded which request's samples."""
        return join(self.lance_root, "optout_builds.lance")

    # MDS tree ----------------------------------------------------------------------------
    def bucket_dir(self, tier: int, height: int, width: int) -> str:
        return join(self.mds_root, str(tier), f"{height}x{width}")

    def source_stream_dir(self, tier: int, height: int, width: int, source: str) -> str:
        return join(self.bucket_dir(tier, height, width), source)

    def report_dir(self) -> str:
        return join(self.mds_root, "_reports")
