"""Which spec file owns a source name: the one its table was built from.

Every ingest records the spec file (by name, inside the sources folder) beside the source's
table (``core.paths.spec_owner_uri``). When two specs claim one name, the registry asks this
record (:meth:`SpecOwners.claim`): the owner keeps the source and the newcomer is rejected, however
the file names sort. A table without a record (built before records were kept) has an owner
nobody can name: then neither claimant is taken until one is removed or renamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prx_data.core.paths import StoragePaths, spec_owner_uri
from prx_data.core.storage import exists, locate, try_read_bytes, write_if_changed


@dataclass(frozen=True)
class Claim:
    """What the storage says about a source name."""

    spec_file: str | None  # the owner's file name, as recorded at its last ingest
    built: bool  # the source's table exists


def _recorded(uri: str, options: dict | None) -> str | None:
    data = try_read_bytes(locate(uri, options))
    if data is None:
        return None
    try:
        value = json.loads(data).get("spec_file")
    except (ValueError, AttributeError):
        return None  # an unreadable record names no owner; the table still exists
    return value if isinstance(value, str) else None


def record_owner(table_uri: str, spec_path: Path, options: dict | None = None) -> None:
    """Record ``spec_path`` as the owner of the table at ``table_uri`` (written only on change)."""
    payload = json.dumps({"spec_file": Path(spec_path).name}, sort_keys=True).encode()
    write_if_changed(locate(spec_owner_uri(table_uri), options), payload)


class SpecOwners:
    """The registry's view of the storage: ``owners(name)`` -> :class:`Claim`. Read only for a
    name that several specs claim."""

    def __init__(self, paths: StoragePaths, options: dict | None = None) -> None:
        self.paths = paths
        self.options = options

    def __call__(self, name: str) -> Claim:
        table = self.paths.raw_table(name)
        recorded = _recorded(self.paths.spec_owner(name), self.options)
        return Claim(recorded, recorded is not None or exists(locate(table, self.options)))

    @classmethod
    def of(cls, settings) -> SpecOwners:
        """From ``core.settings.Settings`` (its roots and storage options)."""
        return cls(StoragePaths.from_settings(settings), settings.storage_options or None)


__all__ = ["Claim", "SpecOwners", "record_owner"]
