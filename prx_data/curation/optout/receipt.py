"""The requester's receipt: what a request matched, where, by which rule, and from which
skip-list build on it is excluded. Also records each build (``record_build``)."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import equals
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.schema import OPTOUT_BUILD_SCHEMA

if TYPE_CHECKING:
    from prx_data.export.skiplist import SpilledSkips


def record_build(paths: StoragePaths, skips: pa.Table | SpilledSkips, options: dict | None = None) -> str:
    """Append one row per filed request to the builds table; returns the build id. ``skips``:
    the build's skip rows, a table or rows spilled by sample id (``SpilledSkips``: counted one
    sample-id range at a time, which sums exactly since a sample lives in one range)."""
    import lance

    built_at = datetime.now(UTC)
    build_id = f"{built_at:%Y%m%dT%H%M%S}Z-{secrets.token_hex(3)}"
    audit = open_table(paths.optout_audit_table(), options)
    requests = sorted(set(audit.to_table(columns=["request_id"])["request_id"].to_pylist())) if audit is not None else []
    excluded: dict[str, int] = {}  # request -> distinct samples excluded
    distinct_shards: dict[str, set[str]] = {}
    for part in [skips] if isinstance(skips, pa.Table) else skips.id_ranges():
        if not part.num_rows:
            continue
        optout = part.filter(pc.starts_with(part["reason"], "optout:"))
        per_request = (
            pa.table(
                {
                    "request": pc.utf8_slice_codeunits(optout["reason"], len("optout:")),
                    "sample_id": optout["sample_id"],
                    "shard": optout["shard"],
                }
            )
            .group_by("request", use_threads=False)
            .aggregate([("sample_id", "count_distinct"), ("shard", "distinct")])
        )
        for request, count, distinct in zip(
            per_request["request"].to_pylist(),
            per_request["sample_id_count_distinct"].to_pylist(),
            per_request["shard_distinct"].to_pylist(),
        ):
            excluded[request] = excluded.get(request, 0) + count
            distinct_shards.setdefault(request, set()).update(distinct)
    shards = {request: sorted(found) for request, found in distinct_shards.items()}
    names = sorted(set(requests) | set(excluded))
    if not names:
        return build_id
    table = pa.table(
        {
            "build_id": [build_id] * len(names),
            "built_at": [built_at] * len(names),
            "request_id": names,
            "samples_excluded": [excluded.get(r, 0) for r in names],
            "shards": [shards.get(r, []) for r in names],
        },
        schema=OPTOUT_BUILD_SCHEMA,
    )
    uri = paths.optout_builds_table()
    mode = "append" if open_table(uri, options) is not None else "create"
    lance.write_dataset(table, uri, mode=mode, storage_options=options)
    return build_id


def _iso(value) -> str | None:
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else value


def receipt(paths: StoragePaths, request_id: str, options: dict | None = None) -> dict:
    """Everything a requester is owed about one request. Raises KeyError when it was never
    resolved (file it, then ``prx-data optout apply``)."""
    audit = open_table(paths.optout_audit_table(), options)
    rows = audit.to_table(filter=equals("request_id", request_id)).to_pylist() if audit is not None else []
    withdrawn = _withdrawals(paths, request_id, options)
    if not rows and withdrawn:
        return {"request_id": request_id, "withdrawn": withdrawn, "builds": _builds(paths, request_id, options)}
    if not rows:
        raise KeyError(f"no resolved opt-out request {request_id!r}: file it, then run `prx-data optout apply`")
    row = rows[0]
    matches_ds = open_table(paths.optout_samples_table(), options)
    matches = matches_ds.to_table(filter=equals("request_id", request_id)).to_pylist() if matches_ds is not None else []
    placements: dict[str, list[dict]] = {}
    for source in sorted({m["source"] for m in matches}):
        ds = open_table(paths.exports_table(source), options)
        if ds is None:
            continue
        ids = [m["sample_id"] for m in matches if m["source"] == source]
        t = ds.to_table(columns=["sample_id", "shard", "index_in_shard"], filter="shard IS NOT NULL")
        t = t.filter(pc.is_in(t["sample_id"], value_set=pa.array(ids, pa.string())))
        for p in t.to_pylist():
            placements.setdefault(p["sample_id"], []).append({"shard": p["shard"], "index_in_shard": p["index_in_shard"]})
    samples = [
        {
            "sample_id": m["sample_id"],
            "source": m["source"],
            "rule": m.get("rule") or "identity",
            "matched_by": m["matched_by"],
            "distance": m.get("distance"),
            "fingerprint_of": m.get("fingerprint_of"),
            "shards": placements.get(m["sample_id"], []),
        }
        for m in sorted(matches, key=lambda m: (m["source"], m["sample_id"]))
    ]
    by_source: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    for s in samples:
        by_source[s["source"]] = by_source.get(s["source"], 0) + 1
        by_rule[s["rule"]] = by_rule.get(s["rule"], 0) + 1
    return {
        "request_id": request_id,
        "requester_note": row["requester_note"],
        "request_file": row["request_file"],
        "first_effective_at": _iso(row["first_effective_at"]),
        "resolved_at": _iso(row["resolved_at"]),
        "named": row.get("named"),
        "matched_samples": len(samples),
        "by_rule": by_rule,
        "by_source": by_source,
        "shards": sorted({p["shard"] for s in samples for p in s["shards"]}),
        "unmatched": row.get("unmatched") or [],
        "problems": row.get("problems") or [],
        "fingerprints": [
            {**f, "phash": None if f["phash"] is None else f"{f['phash'] & 0xFFFFFFFFFFFFFFFF:016x}"} for f in row.get("fingerprints") or []
        ],
        "samples": samples,
        "builds": _builds(paths, request_id, options),
        "state": row.get("state") or "applied",
        "withdrawn": withdrawn,  # earlier withdrawals of this id (it was filed again since)
    }


def _withdrawals(paths: StoragePaths, request_id: str, options: dict | None) -> list[dict]:
    # The table `optout.withdraw` appends to, read here so receipts stay below requests.
    ds = open_table(paths.optout_withdrawals_table(), options)
    if ds is None:
        return []
    rows = sorted(ds.to_table(filter=equals("request_id", request_id)).to_pylist(), key=lambda r: r["withdrawn_at"])
    return [{**r, "withdrawn_at": _iso(r["withdrawn_at"]), "first_effective_at": _iso(r["first_effective_at"])} for r in rows]


def _withdrawal_lines(withdrawn: list[dict]) -> list[str]:
    return [
        f"- withdrawn {w['withdrawn_at']} (in effect since {w['first_effective_at']}, {w['matched_samples']} sample(s) matched then): "
        f"{w['reason']}; file(s) removed: {', '.join(w['files_removed']) or 'none'}"
        for w in withdrawn
    ]


def _builds(paths: StoragePaths, request_id: str, options: dict | None) -> dict:
    """The build from which on the request has been excluded without a gap, and the latest."""
    ds = open_table(paths.optout_builds_table(), options)
    if ds is None:
        return {"excluded_since": None, "latest": None}
    rows = sorted(ds.to_table(filter=equals("request_id", request_id)).to_pylist(), key=lambda r: (r["built_at"], r["build_id"]))
    if not rows:
        return {"excluded_since": None, "latest": None}
    positive = rows[-1]["samples_excluded"] > 0
    since = rows[-1]
    for row in reversed(rows):
        if (row["samples_excluded"] > 0) != positive:
            break
        since = row
    latest = rows[-1]

    def brief(r):
        return {
            "build_id": r["build_id"],
            "built_at": _iso(r["built_at"]),
            "samples_excluded": r["samples_excluded"],
            "shards": len(r["shards"]),
        }

    return {"excluded_since": brief(since), "latest": brief(latest)}


def to_markdown(r: dict) -> str:
    lines = [f"# Opt-out request `{r['request_id']}`", ""]
    if "samples" not in r:  # withdrawn, not filed again
        lines += ["Withdrawn on purpose (`prx-data optout withdraw`); its samples are no longer excluded.", ""]
        lines += _withdrawal_lines(r["withdrawn"])
        return "\n".join(lines) + "\n"
    if r.get("state", "applied") != "applied":
        lines += [f"**{r['state']}**", ""]
    if r["requester_note"]:
        lines += [f"Note: {r['requester_note']}", ""]
    lines += [
        f"- filed as `{r['request_file']}`; in effect since {r['first_effective_at']}; last resolved {r['resolved_at']}",
        f"- names listed: {r['named']}; samples matched: {r['matched_samples']} "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(r['by_rule'].items())) or 'none'})",
        f"- sources: {', '.join(f'{k} ({v})' for k, v in sorted(r['by_source'].items())) or 'none'}",
        f"- shards: {len(r['shards'])}",
    ]
    builds = r["builds"]
    if builds["excluded_since"]:
        since, latest = builds["excluded_since"], builds["latest"]
        lines.append(
            f"- excluded from the loader since skip-list build `{since['build_id']}` ({since['built_at']}); "
            f"latest build `{latest['build_id']}` excludes {latest['samples_excluded']} exported sample(s)"
        )
    else:
        lines.append("- no skip-list build has been recorded since it was resolved: run `prx-data optout apply`")
    if r["samples"]:
        lines += [
            "",
            "## Matched samples",
            "",
            "| sample | source | rule | matched by | distance | fingerprint of | shards |",
            "|---|---|---|---|---|---|---|",
        ]
        for s in r["samples"]:
            shards = "<br>".join(f"{p['shard']} #{p['index_in_shard']}" for p in s["shards"]) or "not exported"
            distance = "" if s["distance"] is None else s["distance"]
            lines.append(
                f"| {s['sample_id']} | {s['source']} | {s['rule']} | {s['matched_by']} | {distance} | {s['fingerprint_of'] or ''} | {shards} |"
            )
    if r["unmatched"]:
        lines += ["", f"## Unmatched ({len(r['unmatched'])})", ""] + [f"- {u}" for u in r["unmatched"][:200]]
        if len(r["unmatched"]) > 200:
            lines.append(f"- ... {len(r['unmatched']) - 200} more (use --json)")
    if r["problems"]:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in r["problems"]]
    if r.get("withdrawn"):
        lines += ["", "## Earlier withdrawals", ""] + _withdrawal_lines(r["withdrawn"])
    lines += ["", f"Fingerprints kept: {len(r['fingerprints'])} (re-applied to every source on every skip-list build)"]
    return "\n".join(lines) + "\n"


def to_json(r: dict) -> str:
    return json.dumps(r, indent=2, default=str)


__all__ = ["receipt", "record_build", "to_json", "to_markdown"]
