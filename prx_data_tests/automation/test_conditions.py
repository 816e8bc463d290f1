"""The automation conditions, evaluated against a real Dagster instance with the real
definitions: what a new source, a settling batch and an opt-out request.

Materializations are recorded as runless events here (conditions only read the event log);
test_incremental.py runs what the conditions request through the real jobs, a new captioner
included."""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.tags import PARTITION_NAME_TAG

from prx_data_tests.automation.conftest import CORPUS, PER_SOURCE, Automation, evaluate_sensor, report_materialized

UNPARTITIONED = {None}


def _spec(data_root, name: str) -> None:
    (data_root / "sources" / f"{name}.yaml").write_text(f"name: {name}\nshape: image_folder\nlocation: {name}\n")


def _chain(*partitions) -> dict[str, set]:
    return {asset: set(partitions) for asset in PER_SOURCE}


def _corpus() -> dict[str, set]:
    return {asset: UNPARTITIONED for asset in CORPUS}


def test_a_new_source_requests_its_whole_chain_and_nothing_else(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    assert auto.tick() == {}
    for name in ("a", "b"):
        _spec(data_root, name)
    cursor = evaluate_sensor(prx_defs, instance, "source_registry_sensor", None).cursor
    assert auto.tick() == _chain("a", "b")
    report_materialized(instance, PER_SOURCE, ["a", "b"])
    assert auto.tick() == _corpus()
    report_materialized(instance, CORPUS)
    assert auto.tick() == {}

    _spec(data_root, "c")
    added = evaluate_sensor(prx_defs, instance, "source_registry_sensor", cursor)
    assert added.run_requests == []  # the sensor only adds the partition
    # Every per-source step for c on one tick (so one run), nothing for a or b, and the corpus
    # waits for c's chain instead of running now and again after it.
    assert auto.tick() == _chain("c")
    report_materialized(instance, PER_SOURCE, ["c"])
    assert auto.tick() == _corpus()
    report_materialized(instance, CORPUS)
    assert auto.tick() == {}


def test_corpus_assets_run_once_after_a_batch_settles(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    auto.tick()
    instance.add_dynamic_partitions("sources", ["a", "b"])
    assert auto.tick() == _chain("a", "b")

    # a's run finished; b's run has started and not finished yet.
    job = prx_defs.resolve_job_def("source_pipeline")
    keys = frozenset(dg.AssetKey(k) for k in PER_SOURCE)
    run_b = instance.create_run_for_job(
        job.get_subset(asset_selection=keys), asset_selection=keys, tags={PARTITION_NAME_TAG: "b"}, status=dg.DagsterRunStatus.STARTED
    )
    report_materialized(instance, PER_SOURCE, ["a"])
    assert auto.tick() == {}  # not once for a ...
    report_materialized(instance, PER_SOURCE, ["b"])
    _finish(instance, run_b)
    assert auto.tick() == _corpus()  # ... but once for the batch
    report_materialized(instance, CORPUS)
    assert auto.tick() == {}


def _finish(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    from dagster._core.events import DagsterEvent, DagsterEventType

    instance.handle_run_event(run.run_id, DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name))


def test_an_optout_folder_change_requests_only_what_depends_on_it(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    auto.tick()
    instance.add_dynamic_partitions("sources", ["a", "b"])
    auto.tick()
    report_materialized(instance, PER_SOURCE, ["a", "b"])
    first = evaluate_sensor(prx_defs, instance, "optout_folder_sensor", None)  # the baseline version
    assert isinstance(first, dg.SensorResult) and len(first.asset_events) == 1
    assert auto.tick() == _corpus()
    report_materialized(instance, CORPUS)
    assert auto.tick() == {}

    optout = data_root / "optout"
    (optout / ".req-1.yaml.swp").write_text("editor state")
    (optout / "req-1.yaml.tmp").write_text("half written")
    unchanged = evaluate_sensor(prx_defs, instance, "optout_folder_sensor", first.cursor)
    assert isinstance(unchanged, dg.SkipReason)  # temp and hidden files are not requests

    (optout / "req-1.yaml").write_text("id: req-1\nurls: [https://example.com/me.jpg]\n")
    changed = evaluate_sensor(prx_defs, instance, "optout_folder_sensor", first.cursor)
    (observation,) = changed.asset_events
    before = first.asset_events[0]
    assert isinstance(observation, dg.AssetObservation) and isinstance(before, dg.AssetObservation)
    assert observation.asset_key == dg.AssetKey("optout_folder") and observation.data_version != before.data_version
    # The tick says what it set off, not "0 runs requested".
    assert "triggers a refresh of optout_requests, skip_lists and corpus_report" in changed.skip_reason.skip_message
    # optout_requests and what depends on it; not corpus_index, nothing per source.
    assert auto.tick() == {"optout_requests": UNPARTITIONED, "skip_lists": UNPARTITIONED, "corpus_report": UNPARTITIONED}
    report_materialized(instance, ["optout_requests", "skip_lists", "corpus_report"])

    # Same content again (rewritten, so a new mtime): no new version, nothing requested.
    (optout / "req-1.yaml").write_text("id: req-1\nurls: [https://example.com/me.jpg]\n")
    assert isinstance(evaluate_sensor(prx_defs, instance, "optout_folder_sensor", changed.cursor), dg.SkipReason)
    # A manual "Observe" in the UI records the same version: not an update either.
    job = prx_defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey("optout_folder")]).success
    latest = instance.fetch_observations(dg.AssetKey("optout_folder"), limit=1).records[0]
    assert latest.asset_observation.data_version == observation.data_version
    assert auto.tick() == {}


def _start_chain(prx_defs, instance: dg.DagsterInstance, partition: str) -> dg.DagsterRun:
    """A launched run of one source's whole chain, as the automation sensor creates it (its
    planned materializations are recorded when it is created)."""
    job = prx_defs.resolve_job_def("source_pipeline")
    keys = frozenset(dg.AssetKey(k) for k in PER_SOURCE)
    return instance.create_run_for_job(
        job.get_subset(asset_selection=keys), asset_selection=keys, tags={PARTITION_NAME_TAG: partition}, status=dg.DagsterRunStatus.STARTED
    )


def _corpus_ticks(history: list[dict]) -> int:
    """Ticks that requested corpus assets: each is one corpus run launched."""
    return sum(1 for wanted in history if any(asset in wanted for asset in CORPUS))


def _built(data_root, prx_defs, instance, auto: Automation, names) -> None:
    for name in names:
        _spec(data_root, name)
    auto.tick()
    instance.add_dynamic_partitions("sources", list(names))
    auto.tick()
    report_materialized(instance, PER_SOURCE, list(names))
    assert auto.tick() == _corpus()
    report_materialized(instance, CORPUS)
    assert auto.tick() == {}


def test_one_new_source_one_corpus_run_after_its_export_finished(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    _built(data_root, prx_defs, instance, auto, ["a", "b"])

    instance.add_dynamic_partitions("sources", ["c"])
    history = [auto.tick()]
    assert history[0] == _chain("c")
    run = _start_chain(prx_defs, instance, "c")
    # The chain has written everything but its export: skip_lists reads caption_labels, which is
    # done, yet must wait for mds_shards (upstream of corpus_index only).
    report_materialized(instance, [a for a in PER_SOURCE if a != "mds_shards"], ["c"])
    history.append(auto.tick())
    assert history[-1] == {}
    report_materialized(instance, ["mds_shards"], ["c"])
    _finish(instance, run)
    history.append(auto.tick())
    assert history[-1] == _corpus()
    report_materialized(instance, CORPUS)
    history.append(auto.tick())
    assert history[-1] == {}
    assert _corpus_ticks(history) == 1


def test_three_new_sources_at_once_one_corpus_run(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    _built(data_root, prx_defs, instance, auto, ["a"])

    new = ["d", "e", "f"]
    instance.add_dynamic_partitions("sources", new)
    history = [auto.tick()]
    assert history[0] == _chain(*new)
    runs = {name: _start_chain(prx_defs, instance, name) for name in new}
    # They finish one by one, each export last; the corpus waits for the last one.
    steps = [
        ("d", ["raw_samples", "phashes", "captions"]),
        ("e", list(PER_SOURCE)),
        ("d", ["caption_labels", "mds_shards"]),
        ("f", ["raw_samples", "phashes", "captions", "caption_labels"]),
        ("f", ["mds_shards"]),
    ]
    for name, assets in steps:
        report_materialized(instance, assets, [name])
        if "mds_shards" in assets:
            _finish(instance, runs[name])
        history.append(auto.tick())
        if name != "f" or "mds_shards" not in assets:
            assert history[-1] == {}, (name, assets)
    assert history[-1] == _corpus()
    report_materialized(instance, CORPUS)
    history.append(auto.tick())
    assert history[-1] == {}
    assert _corpus_ticks(history) == 1
