"""The one place for what lives under the Lance root: every table, its staging and lock, and the
retired copies; each name is spelled here only (``prx_data_tests/test_storage_names.py``).
What lives under the MDS root is named by ``prx_data.export.tree``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prx_data.core.storage import join

TABLE_SUFFIX = ".lance"
SOURCES_DIR = "sources"  # '<source>.lance': raw_samples and the per-row columns
EXPORTS_DIR = "exports"  # '<source>.lance': lineage of the export; its superseded and folds tables beside it
RETIRED_DIR = "retired"  # '<source>/<stamp>/': a retired source's exports tables


class _Roots(Protocol):
    lance_root: str
    mds_root: str


def sibling_uri(table_uri: str, name: str) -> str:
    """``.../<table>.lance`` -> ``.../<table>.<name>``: a file or table kept beside a table."""
    return f"{table_uri.rstrip('/').removesuffix(TABLE_SUFFIX)}.{name}"


def unit_manifest_uri(table_uri: str) -> str:
    """``.../sources/<source>.lance`` -> ``.../sources/<source>.units.lance``: which input
    objects the table holds, by signature (``prx_data.ingest.plan.unit_manifest``)."""
    return sibling_uri(table_uri, f"units{TABLE_SUFFIX}")


def superseded_uri(exports_uri: str) -> str:
    """``.../exports/<source>.lance`` -> ``.../exports/<source>.superseded.lance``."""
    return sibling_uri(exports_uri, f"superseded{TABLE_SUFFIX}")


def staging_uri(table_uri: str, stage: str) -> str:
    """``.../<source>.lance`` -> ``.../<source>.staging-<stage>.lance``: a column stage's staged
    batches (``stages.column_stage``)."""
    return sibling_uri(table_uri, f"staging-{stage}{TABLE_SUFFIX}")


def spec_owner_uri(table_uri: str) -> str:
    """``.../sources/alpha.lance`` -> ``.../sources/alpha.owner.json``: which spec file the
    source's table was built from (``ingest.ownership``)."""
    return sibling_uri(table_uri, "owner.json")


def lock_uri(table_uri: str) -> str:
    """``.../sources/alpha.lance`` -> ``.../sources/alpha.lock`` (``core.locking``)."""
    return sibling_uri(table_uri, "lock")


@dataclass(frozen=True)
class StoragePaths:
    lance_root: str
    mds_root: str

    @classmethod
    def from_settings(cls, settings: _Roots) -> StoragePaths:
        """From ``core.settings.Settings`` (or anything with the two roots)."""
        return cls(lance_root=settings.lance_root, mds_root=settings.mds_root)

    # Lance tables -------------------------------------------------------------------------
    def raw_table(self, source: str) -> str:
        return join(self.lance_root, SOURCES_DIR, f"{source}{TABLE_SUFFIX}")

    def unit_manifest(self, source: str) -> str:
        """Beside the source's table: the signature of every input object it was read from."""
        return unit_manifest_uri(self.raw_table(source))

    def spec_owner(self, source: str) -> str:
        """Beside the source's table: the spec file that owns the source's name."""
        return spec_owner_uri(self.raw_table(source))

    def exports_table(self, source: str) -> str:
        """Where each sample of a source landed in MDS, or why it was dropped."""
        return join(self.lance_root, EXPORTS_DIR, f"{source}{TABLE_SUFFIX}")

    def superseded_table(self, source: str) -> str:
        """Placements in kept shards that an incremental export replaced (skipped as 'superseded')."""
        return superseded_uri(self.exports_table(source))

    def folds_table(self, source: str) -> str:
        """Folded copies of a source's samples: their shard and the bucket they came from (``curation.fold``)."""
        return sibling_uri(self.exports_table(source), f"folds{TABLE_SUFFIX}")

    def retired_dir(self, source: str, stamp: str) -> str:
        """Where a retired source's exports tables are moved (``curation.retire``)."""
        return join(self.lance_root, RETIRED_DIR, source, stamp)

    def optout_audit_table(self) -> str:
        return join(self.lance_root, f"optout_audit{TABLE_SUFFIX}")

    def optout_withdrawals_table(self) -> str:
        return join(self.lance_root, f"optout_withdrawals{TABLE_SUFFIX}")

    def optout_samples_table(self) -> str:
        return join(self.lance_root, f"optout_samples{TABLE_SUFFIX}")

    def optout_builds_table(self) -> str:
        """Which skip-list build excluded which request's samples."""
        return join(self.lance_root, f"optout_builds{TABLE_SUFFIX}")
