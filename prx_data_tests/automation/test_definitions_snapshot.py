"""The loaded Definitions, snapshot-tested: a move or split of the wiring must leave every asset
(its deps, group, partitioning, automation, pool, kinds and tags), check, sensor, schedule, job
and resource as it was. A deliberate change updates the snapshot:

    PYTHONPATH=. .venv/bin/python -m prx_data_tests.automation.test_definitions_snapshot

which also redraws the asset graph in docs/architecture.md (a mermaid block made from the same
Definitions, so the page cannot drift from the code).

Code versions are left out: they follow prompt and model edits (test_policy checks them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg

SNAPSHOT = Path(__file__).with_name("definitions_snapshot.json")
ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"


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


def mermaid(defs: dg.Definitions) -> str:
    """The asset graph as a mermaid flowchart: per-source assets in one box, checks hanging off
    the asset they check."""
    graph = defs.resolve_asset_graph()
    keys = sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string())
    per_source = [k for k in keys if graph.get(k).partitions_def is not None]
    corpus = [k for k in keys if k not in per_source]
    lines = ["flowchart LR"]
    lines.append('  subgraph per_source["per source (one dynamic partition each)"]')
    lines += [f"    {k.to_user_string()}" for k in per_source]
    lines.append("  end")
    lines.append('  subgraph corpus_wide["corpus-wide (unpartitioned)"]')
    for k in corpus:
        shape = f"{k.to_user_string()}[/{k.to_user_string()}/]" if graph.get(k).is_observable else k.to_user_string()
        lines.append(f"    {shape}")
    lines.append("  end")
    for k in keys:
        for parent in sorted(graph.get(k).parent_keys, key=lambda p: p.to_user_string()):
            lines.append(f"  {parent.to_user_string()} --> {k.to_user_string()}")
    for check in sorted(graph.asset_check_keys, key=lambda c: (c.asset_key.to_user_string(), c.name)):
        lines.append(f"  {check.asset_key.to_user_string()} -.- {check.name}{{{{{check.name}}}}}")
    return "\n".join(lines)


def _graph_block(text: str) -> str:
    start = text.index("```mermaid\n") + len("```mermaid\n")
    return text[start : text.index("\n```", start)]


def test_architecture_page_draws_the_loaded_graph(prx_defs):
    assert _graph_block(ARCHITECTURE.read_text()) == mermaid(prx_defs), (
        "docs/architecture.md's asset graph is out of date: regenerate (see module doc)"
    )


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


def test_the_lineage_link_opens_every_group_and_automation_runs_say_so(prx_defs):
    """`prx-data ui`'s Lineage link names every group the graph has (a new group would open
    collapsed), and the automation sensor tags its runs as the CLI and the registry sensor do."""
    from prx_data.defs.asset_groups import ASSET_GROUPS, lineage_path

    graph = prx_defs.resolve_asset_graph()
    assert {graph.get(k).group_name for k in graph.get_all_asset_keys()} == set(ASSET_GROUPS)
    assert all(f"global@global:{g}" in lineage_path() for g in ASSET_GROUPS)
    assert prx_defs.resolve_sensor_def("prx_automation").run_tags == {"prx/launched_by": "automation"}


if __name__ == "__main__":
    import os
    import tempfile

    for name in [n for n in os.environ if n.startswith("PRX_")]:
        del os.environ[name]
    os.environ["PRX_DATA_ROOT"] = tempfile.mkdtemp()
    from prx_data.defs.build import build_defs

    defs = build_defs()
    SNAPSHOT.write_text(json.dumps(describe(defs), indent=1, sort_keys=True) + "\n")
    page = ARCHITECTURE.read_text()
    old = _graph_block(page)
    ARCHITECTURE.write_text(page.replace(f"```mermaid\n{old}\n```", f"```mermaid\n{mermaid(defs)}\n```", 1))
    print(f"wrote {SNAPSHOT} and the graph in {ARCHITECTURE}")


def test_force_reaches_ingest_as_a_full_reread(prx_defs, monkeypatch):
    """`prx-data run --force` (and the launchpad) hand raw_samples `reread_unchanged`; a config the
    job did not accept would fail every forced run at launch."""
    import prx_data.defs.orchestrate as orchestrate

    captured: dict = {}

    def fake_execute(defs, job_name, instance, origin, **kwargs):
        captured.update(kwargs)
        return type("R", (), {"success": True, "all_events": []})()

    monkeypatch.setattr(orchestrate, "execute_named_job", fake_execute)
    monkeypatch.setattr(orchestrate, "ensure_partitions", lambda instance, sources: None)
    monkeypatch.setattr(orchestrate, "repository_origin", lambda workspace, defs: None)
    no_instance: Any = None  # execute_named_job is replaced: no instance is read
    orchestrate.materialize_sources(prx_defs, no_instance, ["photos"], Path("workspace.yaml"), log=lambda _m: None, reread_unchanged=True)
    job = prx_defs.resolve_job_def("source_pipeline")
    resolved = dg.validate_run_config(job, captured["run_config"])
    assert resolved["ops"]["raw_samples"]["config"]["reread_unchanged"] is True
    orchestrate.materialize_sources(prx_defs, no_instance, ["photos"], Path("workspace.yaml"), log=lambda _m: None)
    assert dg.validate_run_config(job, captured["run_config"])["ops"]["raw_samples"]["config"]["reread_unchanged"] is False
