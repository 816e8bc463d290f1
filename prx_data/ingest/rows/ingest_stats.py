"""What one ingest run counted (per unit, then summed by the driver), and the warnings the
counts make: a field named in the spec but empty in every record read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields

from prx_data.ingest.read.raw_item import RawItem

EXAMPLES = 20  # duplicate keys and row errors named in a run's summary


@dataclass
class IngestStats:
    source: str
    rows_by_status: Counter = field(default_factory=Counter)
    seen: int = 0
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    duplicate_keys: list[str] = field(default_factory=list)
    duplicate_key_count: int = 0
    bytes_written: int = 0
    fragments: int = 0
    rows: int = 0
    version: int = 0
    metadata_updated: int = 0
    seconds: float = 0.0
    errors_sample: list[str] = field(default_factory=list)
    file_errors: int = 0
    removals_deferred: int = 0
    warnings: list[str] = field(default_factory=list)
    units: int = 0
    workers: int = 1
    objects_unchanged: int = 0  # input objects not opened: same signature as when last read
    records: int = 0  # items read from a record that parsed (what empty_fields counts against)
    empty_fields: Counter = field(default_factory=Counter)  # named optional field -> records without it

    def absorb(self, part: IngestStats) -> None:
        """Add one unit's counts to the run's."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(part, f.name)
            if f.name in ("source", "fragments", "rows", "version", "seconds", "workers"):
                continue
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, list):
                limit = EXAMPLES if f.name != "warnings" else None
                mine.extend(theirs[: None if limit is None else max(0, limit - len(mine))])
            else:
                setattr(self, f.name, mine + theirs)

    def as_metadata(self) -> dict:
        return {
            "rows": self.rows,
            "rows_seen": self.seen,
            "rows_by_status": dict(sorted(self.rows_by_status.items())),
            "new": self.new,
            "updated": self.updated,
            "metadata_updated": self.metadata_updated,
            "file_errors": self.file_errors,
            "removals_deferred": self.removals_deferred,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "duplicate_keys": self.duplicate_key_count,
            "image_bytes_written": self.bytes_written,
            "fragments": self.fragments,
            "lance_version": self.version,
            "input_units": self.units,
            "objects_unchanged": self.objects_unchanged,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
        }


def count_empty_fields(stats: IngestStats, item: RawItem, spec) -> None:
    """Count a parsed record's empty optional fields, so a field empty in every record (most
    often a misspelt name in a JSONL spec, which has no schema to check) can be named once."""
    if item.file_level or item.error:
        return
    stats.records += 1
    fields = spec.fields
    values = {"caption": item.caption, "embedding": item.embedding}
    if fields.image_kind != "url":  # a URL image fills source_url itself
        values["url"] = item.source_url
    if not spec.license:  # the spec's license fills an empty one
        values["license"] = item.license
    for name, value in values.items():
        if getattr(fields, name) and value is None:
            stats.empty_fields[name] += 1


def empty_field_warnings(stats: IngestStats, spec) -> list[str]:
    return [
        f"fields.{name} {getattr(spec.fields, name)!r} is empty in all {stats.records} records read: a misspelt field name?"
        for name, empty in sorted(stats.empty_fields.items())
        if stats.records and empty == stats.records
    ]
