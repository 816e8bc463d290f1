"""Withdrawing an opt-out request on purpose: the one way a request stops excluding samples.

A request whose file breaks or vanishes keeps its last applied version in force
(``requests.keep_in_force``); only ``prx-data optout withdraw --id ID --reason ...`` removes it.
The steps are ordered so a crash between any two leaves the request in force, never half gone:

1. append the receipt (who was withdrawn, why, the version that was in force) to the
   withdrawals table;
2. remove the request's files from the opt-out folder;
3. drop its row from the audit table and its matches from the samples table.

The caller then rebuilds the skip lists (``curation.refresh``), which re-admits its samples.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import equals
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.schema import OPTOUT_WITHDRAWAL_SCHEMA
from prx_data.curation.optout.requests import REQUEST_SUFFIXES, load_request


def _files_of(folder: Path, request_id: str, recorded: str | None) -> list[Path]:
    """The folder's files that hold ``request_id``, plus the recorded file even if it no longer
    loads (a broken file of a withdrawn request would otherwise be reported forever)."""
    found = []
    if recorded and Path(recorded).parent == folder and (Path(recorded).exists() or Path(recorded).is_symlink()):
        found.append(Path(recorded))
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.suffix not in REQUEST_SUFFIXES or path in found:
                continue
            try:
                if load_request(path).id == request_id:
                    found.append(path)
            except ValueError:
                continue
    return found


def withdraw(paths: StoragePaths, optout_dir: str, request_id: str, reason: str, options: dict | None = None) -> dict:
    """Withdraw ``request_id``; returns the receipt row. Raises ``KeyError`` when no request of
    that id is in force or filed, ``ValueError`` without a reason."""
    import lance

    if not reason or not reason.strip():
        raise ValueError("a withdrawal needs a --reason (it is kept in the receipt)")
    folder = Path(optout_dir)
    audit_ds = open_table(paths.optout_audit_table(), options)
    rows = audit_ds.to_table(filter=equals("request_id", request_id)).to_pylist() if audit_ds is not None else []
    row = rows[0] if rows else {}
    files = _files_of(folder, request_id, row.get("request_file"))
    if not row and not files:
        raise KeyError(f"no opt-out request {request_id!r} is in force or filed in {folder}")
    receipt = {
        "request_id": request_id,
        "withdrawn_at": datetime.now(UTC),
        "reason": reason.strip(),
        "request_file": row.get("request_file") or (str(files[0]) if files else None),
        "request_json": row.get("request_json"),
        "matched_samples": row.get("matched_samples"),
        "first_effective_at": row.get("first_effective_at"),
        "files_removed": [str(p) for p in files],
    }
    uri = paths.optout_withdrawals_table()
    table = pa.Table.from_pylist([receipt], schema=OPTOUT_WITHDRAWAL_SCHEMA)
    lance.write_dataset(table, uri, mode="append" if open_table(uri, options) is not None else "create", storage_options=options)
    for path in files:
        path.unlink(missing_ok=True)
    if row:
        assert audit_ds is not None, "the row was read from the audit table"
        audit = audit_ds.to_table()
        rest = audit.filter(pc.invert(pc.equal(audit["request_id"], request_id)))
        lance.write_dataset(rest, paths.optout_audit_table(), mode="overwrite", storage_options=options)
        samples_ds = open_table(paths.optout_samples_table(), options)
        if samples_ds is not None:
            samples = samples_ds.to_table()
            rest = samples.filter(pc.invert(pc.equal(samples["request_id"], request_id)))
            lance.write_dataset(rest, paths.optout_samples_table(), mode="overwrite", storage_options=options)
    return receipt


def withdrawals(paths: StoragePaths, request_id: str, options: dict | None = None) -> list[dict]:
    """Every withdrawal receipt of ``request_id``, oldest first."""
    ds = open_table(paths.optout_withdrawals_table(), options)
    if ds is None:
        return []
    return sorted(ds.to_table(filter=equals("request_id", request_id)).to_pylist(), key=lambda r: r["withdrawn_at"])


__all__ = ["withdraw", "withdrawals"]
