"""Jobs: the per-source chain, and the corpus-wide steps."""

import dagster as dg

from prx_data.defs.partitions import per_source_selection, sources_partitions

source_pipeline_job = dg.define_asset_job(
    "source_pipeline",
    selection=per_source_selection,
    partitions_def=sources_partitions,
    description="Every per-source stage for one source partition: ingest through export.",
)

corpus_job = dg.define_asset_job(
    "corpus",
    selection=dg.AssetSelection.all() - per_source_selection,
    description="Corpus-wide steps: index, skip lists, opt-outs, report.",
)
