"""The loaded Definitions, snapshot-tested: a move or split of the wiring must leave every asset
(its deps, group, partitioning, automation, pool, kinds and tags), check, sensor, schedule, job
and resource as it was. A deliberate change updates the snapshot:

    PYTHONPATH=. .venv/bin/python -m prx_data_tests.automation.test_definitions_snapshot

Code versions are left out: they follow prompt and model edits (test_policy checks them).
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

SNAPSHOT = Path(__file__).with_name("definitions_snapshot.json")


def describe(defs: dg.Definitions) -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "deps": sorted(p.to_user_string() for p in node.parent_keys),
            "group": node.group_name,
            "partitioned": node.partitions_def is not None,
            "automation": node.automation_condition.get_label() if node.automation_condition else None,
            "pools": sorted(node.pools or []),
            "kinds": sorted(node.kinds),
            "tags": dict(sorted(node.tags.items())),
            "observable": node.is_observable,
        }
    return {
        "assets": dict(sorted(assets.items())),
        "checks": sorted(f"{c.asset_key.to_user_string()}:{c.name}" for c in graph.asset_check_keys),
        "sensors": sorted(s.name for s in defs.sensors or []),
        "schedules": sorted(s.name for s in defs.schedules or []),
        "jobs": sorted({j.name for j in defs.jobs or []}),
        "resources": sorted(defs.resources or {}),
    }


def test_definitions_match_the_snapshot(prx_defs):
    current = describe(prx_defs)
    expected = json.loads(SNAPSHOT.read_text())
    assert current == expected, f"Definitions changed; if on purpose, regenerate {SNAPSHOT.name} (see module doc)"


def test_the_snapshot_sees_a_change(prx_defs):
    # The comparison is not vacuous: one extra sensor or one dep less shows.
    changed = describe(prx_defs)
    changed["assets"]["skip_lists"]["deps"].pop()
    assert changed != json.loads(SNAPSHOT.read_text())
    assert len(changed["assets"]) >= 10 and changed["checks"] and changed["sensors"]


if __name__ == "__main__":
    import os
    import tempfile

    for name in [n for n in os.environ if n.startswith("PRX_")]:
        del os.environ[name]
    os.environ["PRX_DATA_ROOT"] = tempfile.mkdtemp()
    from prx_data.defs.build import build_defs

    SNAPSHOT.write_text(json.dumps(describe(build_defs()), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
