"""The ``prx-data ui`` terminal filter on lines as ``dagster dev`` and its runs print them
(taken from a real session's terminal): records below the level go with their continuation
lines; warnings, errors and what is not a Dagster record pass; Dagster's preview notes go."""

from __future__ import annotations

import io

from prx_data.app.ui_log import LineFilter, forward

SESSION = [
    ("Dagster UI on /data", True),
    (
        "\x1b[32m2026-12-04 19:18:14 +0000\x1b[0m - dagster - \x1b[34mWARNING\x1b[0m - /venv/dagster/_core/decorator_utils.py:232: "
        "BetaWarning: Function `observable_source_asset` is currently in beta",
        False,
    ),
    ("  return fn(*args, **kwargs)", False),
    (
        "/venv/dagster/_core/definitions/sensor_definition.py:809: BetaWarning: Parameter `owners` of initializer "
        "`SensorDefinition.__init__` is currently in beta",
        False,
    ),
    ("  return SensorDefinition(", False),
    ("2026-12-04 19:19:47 +0000 - dagster - DEBUG - __ASSET_JOB - 4e12b057 - 19565 - RUN_START - Started execution", False),
    ("2026-12-04 19:19:50 +0000 - dagster - DEBUG - __ASSET_JOB - 4e12b057 - raw_samples - Traceback (most recent call last):", False),
    ('  File "prx_data/ingest/read/lance_table.py", line 24, in read_lance', False),
    ("2026-12-04 19:19:50 +0000 - dagster - INFO - source_pipeline - 4e12b057 - raw_samples - ingested 6 rows", False),
    ("2026-12-04 19:19:50 +0000 - dagster - ERROR - __ASSET_JOB - 4e12b057 - 19565 - raw_samples - STEP_FAILURE - failed.", True),
    ("dagster._core.definitions.events.Failure: source 'ghost': cannot open Lance table", True),
    (
        "2026-12-04 19:18:23 +0000 - dagster.daemon.EventLogConsumerDaemon - WARNING - No cursor for event type RUN_FAILURE",
        True,
    ),
    ("  open http://127.0.0.1:3000   (Enter prints this again; Ctrl-C stops it)", True),
]


def test_warning_level_shows_warnings_and_errors_only() -> None:
    keep = LineFilter("warning")
    assert [keep.show(line) for line, _ in SESSION] == [shown for _, shown in SESSION]


def test_info_brings_info_back_and_forward_copies_what_is_shown() -> None:
    keep = LineFilter("INFO")
    assert keep.show(SESSION[8][0]) and not keep.show(SESSION[5][0])
    out = io.StringIO()
    forward(io.BytesIO("".join(line + "\n" for line, _ in SESSION).encode()), out, "warning")
    assert out.getvalue() == "".join(line + "\n" for line, shown in SESSION if shown)
