"""From an item to a raw-table row: the cheap image probe (``image_probe``, with its structure
walk ``image_structure``), the row and the fingerprints change detection compares
(``raw_row``), and a run's counts (``ingest_stats``)."""
