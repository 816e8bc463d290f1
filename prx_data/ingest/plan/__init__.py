"""Planning a run: which units a source has (``unit_listing``), which input objects changed
since the last run (``unit_manifest``), and the sample ids the run found, for duplicate keys and
removals (``seen_ids``)."""
