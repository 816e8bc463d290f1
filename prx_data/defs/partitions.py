"""One dynamic partition per registered source; the registry sensor adds them."""

import dagster as dg

SOURCES_PARTITION = "sources"
sources_partitions = dg.DynamicPartitionsDefinition(name=SOURCES_PARTITION)

# Per-source assets carry this tag so jobs and automation can select "the chain of one source".
PER_SOURCE_TAG = {"prx/scope": "source"}
per_source_selection = dg.AssetSelection.tag("prx/scope", "source")

# Run tag with the spec fingerprint that a sensor-requested run was made for.
SOURCE_TAG_FINGERPRINT = "prx/spec_fingerprint"
