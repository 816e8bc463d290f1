"""Corpus-wide curation: opt-out requests, table maintenance, and the data card."""

import dataclasses

import dagster as dg

from prx_data.curation.retire import receipts, receipts_markdown
from prx_data.defs.conditions import CORPUS_SETTLED
from prx_data.defs.export.resources import ExportResource
from prx_data.defs.failures import fail_fast
from prx_data.defs.resources import SourceRegistryResource, StorageResource


@dg.asset(
    deps=["phashes", "mds_shards", "optout_folder"],
    group_name="curation",
    kinds={"lance"},
    automation_condition=CORPUS_SETTLED,
    check_specs=[
        dg.AssetCheckSpec(
            "every_request_loads",
            asset="optout_requests",
            description="Every file of the opt-out folder loads as a request and no applied request vanished. "
            "When one fails, its last applied version stays in force (the asset itself succeeds); the check "
            "names the file. Withdraw on purpose with `prx-data optout withdraw --id ID --reason ...`.",
        )
    ],
    description="Resolves every opt-out request (sample ids, source keys, URLs, domains, image files "
    "and all their perceptual copies) to samples for skip_lists, and keeps an audit table.",
)
@fail_fast
def optout_requests(context: dg.AssetExecutionContext, storage: StorageResource, registry: SourceRegistryResource) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.curation.optout.requests import apply_requests

    sources = sorted(registry.load(storage).sources)
    report = apply_requests(storage.paths, registry.optout_dir, sources, storage.options)
    for error in report.errors:
        context.log.error(f"opt-out request not applied: {error}")
    for duplicate in report.duplicates:
        context.log.info(f"request filed twice, applied once: {duplicate}")
    audit = report.audit.to_pylist()
    for row, line in zip(audit, report.summary_lines()):
        # One line per request: a bulk request's unmatched names are in the audit table.
        (context.log.warning if row["problems"] else context.log.info)(line + "".join(f"; {p}" for p in row["problems"]))
    check = dg.AssetCheckResult(
        check_name="every_request_loads",
        passed=not report.errors,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(report.errors)[:2000] or "every request file loaded",
        metadata={
            "errors": dg.MetadataValue.json(report.errors),
            "kept_in_force": dg.MetadataValue.json(report.kept),
        },
    )
    return dg.MaterializeResult(
        check_results=[check],
        metadata={
            "requests": report.requests,
            "matched_samples": report.matched.num_rows,
            "bad_requests": len(report.errors),
            "per_request": dg.MetadataValue.json({r["request_id"]: r["matched_samples"] for r in audit}),
            "shards_touched": dg.MetadataValue.json({r["request_id"]: r["shards_touched"] for r in audit}),
            "audit_table": dg.MetadataValue.path(storage.paths.optout_audit_table()),
        },
    )


@dg.asset(
    deps=["raw_samples", "mds_shards"],
    group_name="curation",
    kinds={"lance"},
    description="Compacts every source and exports table towards the target rows per fragment and "
    "brings the full-text, scalar and vector indexes up to date.",
)
@fail_fast
def table_maintenance(
    context: dg.AssetExecutionContext, storage: StorageResource, registry: SourceRegistryResource
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.curation.maintenance import EXPORT_INDEXES, SOURCE_INDEXES, maintain_table

    reports = []
    for source in sorted(registry.load(storage).sources):
        for uri, indexes in (
            (storage.paths.raw_table(source), SOURCE_INDEXES),
            (storage.paths.exports_table(source), EXPORT_INDEXES),
        ):
            report = maintain_table(uri, target_rows_per_fragment=storage.rows_per_fragment, indexes=indexes, options=storage.options)
            if report is not None:
                reports.append(report)
                context.log.info(f"{uri}: fragments {report.fragments_before} -> {report.fragments_after}; {report.indexes}")
    return dg.MaterializeResult(
        metadata={
            "tables": len(reports),
            "fragments_before": sum(r.fragments_before for r in reports),
            "fragments_after": sum(r.fragments_after for r in reports),
            "compacted": sum(r.compacted for r in reports),
            "per_table": dg.MetadataValue.json(
                {
                    r.uri.removeprefix(storage.lance_root): {"fragments": [r.fragments_before, r.fragments_after], "indexes": r.indexes}
                    for r in reports
                }
            ),
        }
    )


@dg.asset(
    deps=["skip_lists"],
    group_name="curation",
    kinds={"mds"},
    automation_condition=CORPUS_SETTLED,
    description="A data card for the current export: counts per source, tier, bucket, label and "
    "exclusion reason, caption lengths, captioner and prompt versions.",
)
@fail_fast
def corpus_report(
    context: dg.AssetExecutionContext, storage: StorageResource, registry: SourceRegistryResource, export: ExportResource
) -> dg.MaterializeResult:
    # lazy: the code location loads without lance (Dagster imports it in every process)
    from prx_data.curation.refresh import write_data_card

    card, path = write_data_card(
        storage.paths, registry.load(storage).sources, exclude_labels=export.exclude_labels, options=storage.options
    )
    retired = receipts(storage.mds_root, storage.options)
    if retired:
        # The receipt of every retired source (curation/retire.py) belongs on the card.
        card = dataclasses.replace(card, markdown=card.markdown + receipts_markdown(retired))
        path = card.write(storage.mds_root, storage.options)
    return dg.MaterializeResult(
        metadata={
            "data_card": dg.MetadataValue.md(card.markdown),
            "path": dg.MetadataValue.path(path),
            "retired_sources": dg.MetadataValue.json({r.source: r.retired_at for r in retired}),
            "exported": card.totals["exported"],
            "skipped": card.totals["skipped"],
            "trainable": card.totals["trainable"],
        }
    )
