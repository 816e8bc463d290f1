"""The asset groups of the graph, and the Lineage view's address with every group open.

Dagster's UI (1.13) draws the Lineage view with every group collapsed unless the address names
the groups to open (``?expanded=``, which it then keeps in the browser's local storage); no
definition flag changes that default. ``prx-data ui`` prints this address beside the UI's own.
Plain data, no Dagster import: the app reads it without loading the definitions.
"""

from urllib.parse import quote

# Every asset's group_name, in pipeline order; prx_data_tests checks it against the definitions.
ASSET_GROUPS = ("ingest", "image", "caption", "export", "curation")


def lineage_path(repository: str = "__repository__", location: str = "prx_data") -> str:
    """``/asset-groups`` with every group expanded. A group's id in the UI is
    ``global@global:<group>``, or ``<repository>@<location>:<group>`` with the UI's per-location
    groups flag on; both are listed (an id the page does not draw is ignored)."""
    ids = [f"global@global:{g}" for g in ASSET_GROUPS] + [f"{repository}@{location}:{g}" for g in ASSET_GROUPS]
    return "/asset-groups?expanded=" + quote(",".join(ids), safe="@:,_")
