"""Every bad source spec and opt-out request in one place: the ``source_registry`` asset's check.

The registry sensor reports this check's evaluation whenever the set of problems changes, so
the asset graph shows a red check with a table of files and messages as soon as a bad file
lands, and green again once it is fixed or removed; executing the check from the UI evaluates
the folders on the spot.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import dagster as dg

from prx_data.curation.optout.requests import OptOutFolderError, load_requests
from prx_data.defs.resources import SourceRegistryResource, StorageResource
from prx_data.ingest.registry import Registry

SOURCE_REGISTRY = dg.AssetKey("source_registry")
CHECK_NAME = "specs_and_requests_valid"
DOC = "docs/ui.md#bad-specs-and-requests"


@dataclass(frozen=True)
class Problem:
    kind: str  # "source spec" or "opt-out request"
    file: str
    message: str


def registry_problems(reg: Registry, optout_dir: str) -> list[Problem]:
    problems = [Problem("source spec", str(e.path), e.message) for e in reg.errors]
    try:
        # A root without an opt-out folder has no request to report; whether one vanished
        # after requests were applied is optout_requests' to say (it keeps them in force).
        loaded = load_requests(optout_dir, missing_ok=True)
    except OptOutFolderError as exc:  # there but unreadable
        return [*problems, Problem("opt-out folder", optout_dir, str(exc))]
    for line in loaded.errors:
        # load_requests words each error "<path>: <message>".
        file, _, message = line.partition(": ")
        problems.append(Problem("opt-out request", file, message or line))
    return problems


def problems_digest(problems: list[Problem]) -> str:
    payload = json.dumps(sorted((p.kind, p.file, p.message) for p in problems))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def problems_metadata(problems: list[Problem], source_count: int) -> dict:
    return {
        "sources": source_count,
        "bad_files": len(problems),
        "problems": dg.MetadataValue.table(
            records=[dg.TableRecord({"kind": p.kind, "file": p.file, "message": p.message}) for p in problems],
            schema=dg.TableSchema(columns=[dg.TableColumn("kind"), dg.TableColumn("file"), dg.TableColumn("message")]),
        ),
        "fix": dg.MetadataValue.md(f"Fix or remove each file listed; the other sources and requests go on. See `{DOC}`."),
    }


def problems_evaluation(problems: list[Problem], source_count: int) -> dg.AssetCheckEvaluation:
    """The check's result as the sensor reports it (no run involved)."""
    return dg.AssetCheckEvaluation(
        asset_key=SOURCE_REGISTRY,
        check_name=CHECK_NAME,
        passed=not problems,
        metadata=problems_metadata(problems, source_count),
        description=problems_summary(problems) or f"{source_count} source spec(s), every spec and request valid",
    )


def problems_summary(problems: list[Problem]) -> str:
    if not problems:
        return ""
    return f"{len(problems)} bad file(s): " + "; ".join(f"{p.file}: {p.message}" for p in problems)


source_registry = dg.AssetSpec(
    SOURCE_REGISTRY,
    group_name="ingest",
    description="The source specs folder (PRX_SOURCES_DIR) and the opt-out requests folder "
    "(PRX_OPTOUT_DIR). Its check lists every file that cannot be used, with the reason; the "
    "registry sensor keeps the check current.",
)


@dg.asset_check(
    asset=SOURCE_REGISTRY,
    name=CHECK_NAME,
    description="Every source spec and opt-out request parses and validates; a failing check lists each bad file with its message.",
)
def specs_and_requests_valid(registry: SourceRegistryResource, storage: StorageResource) -> dg.AssetCheckResult:
    reg = registry.load(storage)
    problems = registry_problems(reg, registry.optout_dir)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata=problems_metadata(problems, len(reg.sources)),
        description=problems_summary(problems) or None,
    )
