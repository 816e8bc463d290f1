"""Opening the UI on data that ``prx-data run`` just built launches nothing: the first ticks of
the sensors (empty cursors) and of declarative automation (no cursor), against the instance the
CLI wrote, request no run. A changed spec still re-ingests exactly that source."""

from __future__ import annotations

import contextlib
import io

import dagster as dg
import pytest

from prx_data.app.cli import main
from prx_data.core.settings import get_settings
from prx_data.demo.corpus import build_demo_corpus
from prx_data_tests.automation.conftest import Automation, evaluate_sensor

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KEPT = ("archive", "links")  # two small demo sources of two shapes


@pytest.fixture
def built(data_root, tmp_path, monkeypatch):
    build_demo_corpus(data_root)
    for spec in (data_root / "sources").glob("*.yaml"):
        if spec.stem not in KEPT:
            spec.unlink()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", "--root", str(data_root)])
    assert code == 0, out.getvalue()
    assert "prx-data ui" in out.getvalue()
    get_settings.cache_clear()
    from prx_data.definitions import build_defs

    with dg.DagsterInstance.get() as instance:
        yield build_defs(), instance


def test_first_ticks_on_built_data_request_nothing(built, data_root):
    defs, instance = built
    # In the daemon's order: automation ticks as soon as the UI starts, the sensors' first ticks
    # come next, then automation evaluates what they recorded.
    auto = Automation(defs, instance)
    assert auto.tick() == {}
    registry = evaluate_sensor(defs, instance, "source_registry_sensor", None)
    # The specs match what the tables were ingested from: nothing to run, no new partition; the
    # cursor keeps what the tick learnt.
    assert isinstance(registry, dg.SensorResult) and registry.skip_reason is not None
    assert not registry.run_requests and not registry.dynamic_partitions_requests
    assert isinstance(evaluate_sensor(defs, instance, "source_registry_sensor", registry.cursor), dg.SkipReason)
    # The folder is as `prx-data run` recorded it: no new observation, so nothing downstream.
    optout = evaluate_sensor(defs, instance, "optout_folder_sensor", None)
    assert isinstance(optout, dg.SensorResult) and not optout.asset_events
    assert auto.tick() == {}
    assert auto.tick() == {}

    # The comparisons are with what the tables hold: a spec edited since the run re-ingests that
    # source only, and a new opt-out request reaches the corpus assets.
    spec = data_root / "sources" / "links.yaml"
    spec.write_text(spec.read_text() + "priority: 7\n")
    again = evaluate_sensor(defs, instance, "source_registry_sensor", registry.cursor)
    assert [(r.partition_key, r.asset_selection) for r in again.run_requests] == [("links", [dg.AssetKey("raw_samples")])]
    (data_root / "optout" / "req-1.yaml").write_text("id: req-1\nurls: [https://example.com/me.jpg]\n")
    changed = evaluate_sensor(defs, instance, "optout_folder_sensor", optout.cursor)
    assert len(changed.asset_events) == 1
    assert "optout_requests" in auto.tick()
