"""A new URL source's first downloads, started while the orchestrator starts up.

``prx-data run`` knows which sources it will ingest within a second of its start; the ingest
step itself began 1.5-2.5 s later, after Dagster's imports, storage and definitions. For a URL list
that is ingested in this process (``workers: 1``) the first unit's first URLs are sent to the
process's download session (``download_session.shared_session``) at once, so the requests are on the
wire during that start-up; the step's stream then takes those downloads over instead of
fetching the URLs again (``DownloadSession.start_early``), so the first request leaves within
about a second of the command's start (docs/downloads.md).

Only a source without a table yet: every URL of it is new, so nothing is fetched that the
step would not fetch. For an ingested source the step's change detection decides, and nothing
starts early. The step still makes every decision (opt-outs, the probe, the rows); a download
nobody claims (the run failed before its ingest) is stopped by ``drop_unclaimed`` once the
command's runs are over. Best effort: any error here is left for the step to meet and report.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prx_data.ingest.registry import RegisteredSource

_log = logging.getLogger(__name__)


def start_first_downloads(
    source: RegisteredSource, table_uri: str, storage_options: dict | None = None, default_workers: int | None = None
) -> threading.Thread | None:
    """Start, in a background thread, the downloads ``source``'s ingest will begin with; the
    thread, or None when nothing can start early (not a URL list read in this process)."""
    spec = source.spec
    if spec.fields.image_kind != "url" or spec.ingest_workers(default_workers) > 1:
        return None

    def run() -> None:
        # lazy, in this thread: the download path and lance load beside the orchestrator's own imports
        from prx_data.core.lance_io import open_table
        from prx_data.ingest.http.download_session import shared_session
        from prx_data.ingest.plan.unit_listing import list_units
        from prx_data.ingest.read.object_store import source_storage_options
        from prx_data.ingest.read.units import Unit, read_unit

        try:
            if open_table(table_uri, storage_options) is not None:
                return
            options = source_storage_options(spec, storage_options) if source.remote else None
            first = next((u for u in list_units(source, storage_options=options) if isinstance(u, Unit)), None)
            if first is None:
                return
            session = shared_session(spec.download)
            items = ((i.key, i.url) for i in read_unit(source, first, options) if i.url and i.data is None and not i.error)
            # The stream's own look-ahead: what it would have in flight at its start.
            session.start_early(itertools.islice(items, 4 * spec.download.concurrency), 2 * spec.download.concurrency)
        except Exception as exc:  # noqa: BLE001
            _log.debug("early downloads of %s not started: %s", spec.name, exc)

    thread = threading.Thread(target=run, name=f"prx-early-{spec.name}", daemon=True)
    thread.start()
    return thread


def drop_unclaimed() -> None:
    """Stop the early downloads no run claimed (call once the command's source runs are over):
    a run that failed before its ingest must not leave requests that the exit then waits for."""
    download = sys.modules.get("prx_data.ingest.http.download_session")
    if download is not None:  # never imported: nothing was started
        download.drop_early_downloads()
