"""What the automation conditions request, run through the real jobs on Ray: a new source flows
to the export by itself, appended rows are the only rows the stages process, and a new
captioner marks every partition stale but redoes only rows that are not current."""

from __future__ import annotations

import dagster as dg
import lance
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data_tests.automation.conftest import CORPUS, PER_SOURCE, Automation, evaluate_sensor, local_stages, write_folder_source
from prx_data_tests.conftest import materializations
from prx_data_tests.models.fake_openai import FakeChatServer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _meta(results, asset: str) -> dict:
    (mat,) = [m for r in results for m in materializations(r, asset)]
    return {k: v.value for k, v in mat.metadata.items()}


def _checks(results) -> dict[str, bool]:
    return {
        e.event_specific_data.asset_check_key.to_user_string(): e.event_specific_data.passed
        for r in results
        for e in r.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def test_appended_rows_are_the_only_rows_processed(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    auto.tick()
    folder = write_folder_source(data_root, "alpha", 4)
    evaluate_sensor(prx_defs, instance, "source_registry_sensor", None)

    # The new source reaches the export with no run started by hand: its chain, then the corpus.
    assert auto.settle() == [{a: {"alpha"} for a in PER_SOURCE}, {a: {None} for a in CORPUS}]
    assert all(r.success for r in auto.runs)
    assert _meta(auto.runs, "mds_shards")["exported"] == 4
    assert all(_checks(auto.runs).values()), _checks(auto.runs)

    # Two more pictures land in the source folder and the source is re-ingested (what the
    # registry sensor asks for when a spec changes, or a user from the UI).
    write_folder_source(data_root, "alpha", 2, start=4)
    reingest = prx_defs.resolve_job_def("source_pipeline").execute_in_process(
        instance=instance, partition_key="alpha", asset_selection=[dg.AssetKey("raw_samples")]
    )
    assert _meta([reingest], "raw_samples")["new"] == 2 and _meta([reingest], "raw_samples")["unchanged"] == 4
    auto.runs.clear()
    assert auto.settle() == [{a: {"alpha"} for a in PER_SOURCE if a != "raw_samples"}, {a: {None} for a in CORPUS}]

    phashes, captions, labels = (_meta(auto.runs, a) for a in ("phashes", "captions", "caption_labels"))
    assert (phashes["rows_hashed"], phashes["skipped_current"]) == (2, 4)
    assert (captions["captioned"], captions["skipped_current"]) == (2, 4)
    assert (labels["labelled"], labels["skipped_current"]) == (2, 4)
    assert _meta(auto.runs, "mds_shards")["exported"] == 6
    assert folder.exists() and all(_checks(auto.runs).values())


def test_a_new_captioner_marks_partitions_stale_and_redoes_only_stale_rows(data_root, prx_defs, instance, redeploy):
    auto = Automation(prx_defs, instance)
    auto.tick()
    write_folder_source(data_root, "alpha", 3)
    write_folder_source(data_root, "beta", 2)
    evaluate_sensor(prx_defs, instance, "source_registry_sensor", None)
    auto.settle()
    assert all(r.success for r in auto.runs)
    captions = dg.AssetKey("captions")
    assert _status(auto.defs, instance, captions, "alpha") == StaleStatus.FRESH

    with FakeChatServer() as server:
        auto.defs = redeploy(
            {"backend": "openai", "model_id": "vlm-1", "server": {"base_url": server.base_url, "model": "fake-vl", "max_retries": 1}}
        )
        # The UI shows every partition stale, with the code version as the cause.
        assert {_status(auto.defs, instance, captions, p) for p in ("alpha", "beta")} == {StaleStatus.STALE}
        wanted = auto.tick()
        assert wanted == {a: {"alpha", "beta"} for a in ("captions", "caption_labels", "mds_shards")}

        # Someone re-ran beta by hand before the automation runs started.
        by_hand_assets = [captions, dg.AssetKey("caption_labels")]
        by_hand = auto.defs.resolve_job_def("source_pipeline").execute_in_process(
            instance=instance, partition_key="beta", asset_selection=by_hand_assets, run_config=local_stages(by_hand_assets)
        )
        assert _meta([by_hand], "captions")["captioned"] == 2
        auto.runs.clear()
        runs = auto.launch(wanted)
        assert all(r.success for r in runs)
        alpha, beta = runs  # one run per partition, in order
        assert _meta([alpha], "captions")["captioned"] == 3 and _meta([alpha], "caption_labels")["labelled"] == 3
        # Rows already made by the new captioner are not sent to it again.
        assert (_meta([beta], "captions")["captioned"], _meta([beta], "captions")["skipped_current"]) == (0, 2)
        assert _meta([beta], "caption_labels")["labelled"] == 0
        assert len(server.requests) == 3 + 2
        assert {_status(auto.defs, instance, captions, p) for p in ("alpha", "beta")} == {StaleStatus.FRESH}


def _status(defs: dg.Definitions, instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> StaleStatus:
    # The resolver behind the UI's "stale" badge (internal API; dagster is pinned).
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    return resolver.get_status(key, partition)


def test_a_spec_that_breaks_keeps_its_tables_and_exports_and_the_others_go_on(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    auto.tick()
    write_folder_source(data_root, "alpha", 2)
    write_folder_source(data_root, "beta", 2)
    cursor = evaluate_sensor(prx_defs, instance, "source_registry_sensor", None).cursor
    auto.settle()
    paths = StoragePaths.from_settings(get_settings())
    before = {uri: lance.dataset(uri).version for uri in (paths.raw_table("alpha"), paths.exports_table("alpha"))}

    (data_root / "sources" / "alpha.yaml").write_text("name: alpha\nshape: nope\n")
    (data_root / "sources" / "beta.yaml").write_text((data_root / "sources" / "beta.yaml").read_text() + "priority: 3\n")
    tick = evaluate_sensor(prx_defs, instance, "source_registry_sensor", cursor)
    assert [(r.partition_key, r.asset_selection) for r in tick.run_requests] == [("beta", [dg.AssetKey("raw_samples")])]
    auto.runs.clear()
    assert auto.run("beta", ["raw_samples"]).success
    assert auto.tick() == {a: {"beta"} for a in PER_SOURCE if a != "raw_samples"}

    # Someone re-materializes the broken source anyway: the step fails and says why (after the
    # step retries, which a spec error does not deserve: see the report), the tables and export it
    # had stay as they were, and automation asks nothing more for it.
    failed = auto.run("alpha", ["raw_samples"])
    assert not failed.success
    error = next(e for e in failed.all_events if e.is_step_failure).event_specific_data.error.to_string()
    assert "no valid source spec named 'alpha'" in error and "alpha.yaml" in error
    assert {uri: lance.dataset(uri).version for uri in before} == before
    assert auto.tick() == {}
