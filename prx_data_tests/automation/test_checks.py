"""Asset checks run in the same runs as their assets; each one made to pass and to fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import lance
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.definitions import build_defs
from prx_data.export.tree import list_buckets
from prx_data_tests import images
from prx_data_tests.automation.conftest import CORPUS, PER_SOURCE, Automation, write_folder_source

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _checks(result) -> dict[str, Any]:
    # Any: check metadata values are a union of every MetadataValue kind; each test compares
    # them with the concrete value it expects.
    return {
        e.event_specific_data.asset_check_key.to_user_string(): e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def _passed(result) -> dict[str, bool]:
    return {name: ev.passed for name, ev in _checks(result).items()}


def _materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"}


SOURCE_CHECKS = {
    "raw_samples:ingest_error_share",
    "raw_samples:fragment_count",
    "captions:caption_coverage",
    "captions:caption_length",
    "mds_shards:usable_rows_accounted",
}


def _bad_source(data_root, good_folder) -> None:
    """Two broken files in six, one picture without a caption, and one-word captions on copies
    of good's pictures (so the dedup skips them in good's stream)."""
    folder = data_root / "inputs" / "bad"
    folder.mkdir(parents=True)
    (folder / "nocaption.jpg").write_bytes(images.jpeg(512, 512, seed=4242))
    for i in (1, 2, 3):
        (folder / f"copy{i}.jpg").write_bytes((good_folder / f"img{i:03d}.jpg").read_bytes())
        (folder / f"copy{i}.txt").write_text("photo")
    (folder / "broken1.jpg").write_bytes(b"not an image at all\n" * 10)
    (folder / "broken2.jpg").write_bytes(images.truncated_jpeg())
    (data_root / "sources" / "bad.yaml").write_text(f"name: bad\nshape: image_folder\nlocation: {folder}\npriority: 0\n")


def test_checks_pass_on_a_clean_source_and_fail_on_purpose(data_root, prx_defs, instance):
    auto = Automation(prx_defs, instance)
    good_folder = write_folder_source(data_root, "good", 4, spec_extra="priority: 10\n")
    _bad_source(data_root, good_folder)
    instance.add_dynamic_partitions("sources", ["good", "bad"])

    good = auto.run("good", PER_SOURCE)
    assert good.success and _passed(good) == dict.fromkeys(SOURCE_CHECKS, True)
    (export,) = good.asset_materializations_for_node("mds_shards")
    folders = export.metadata["shard_folders"]  # a table the UI renders, not a JSON blob
    assert isinstance(folders, dg.TableMetadataValue)
    assert [(r.data["samples"], str(r.data["folder"]).endswith("/good/")) for r in folders.records] == [(4, True)]
    corpus = auto.run(None, CORPUS)
    assert _passed(corpus) == {
        "corpus_index:bucket_streams_readable": True,
        "optout_requests:every_request_loads": True,
        "skip_lists:skipped_share_per_stream": True,
    }

    bad = auto.run("bad", PER_SOURCE)
    # Warnings do not fail the run: the source is exported as far as it is usable.
    assert bad.success
    assert _passed(bad) == {
        "raw_samples:ingest_error_share": False,  # 2 of 6 rows
        "raw_samples:fragment_count": True,
        "captions:caption_coverage": False,  # 3 of 4 usable rows
        "captions:caption_length": False,  # 1 word
        "mds_shards:usable_rows_accounted": True,  # the uncaptioned row is dropped with a reason
    }
    checks = _checks(bad)
    assert all(
        checks[name].severity == dg.AssetCheckSeverity.WARN
        for name in ("raw_samples:ingest_error_share", "captions:caption_coverage", "captions:caption_length")
    )
    assert checks["raw_samples:ingest_error_share"].metadata["error_rows"].value == 2
    assert checks["captions:caption_coverage"].metadata["captioned"].value == 3
    assert checks["captions:caption_length"].metadata["words_max"].value == 1

    # The same source, its noise declared in its spec: green while it is as declared, and the
    # spec change re-runs nothing (thresholds are not part of the source's fingerprint).
    from prx_data.ingest.registry import load_registry

    spec = data_root / "sources" / "bad.yaml"
    before = load_registry(data_root / "sources").get("bad").fingerprint
    spec.write_text(spec.read_text() + "checks: {max_error_share: 0.34, min_caption_coverage: 0.75, max_caption_length_outliers: 1.0}\n")
    assert load_registry(data_root / "sources").get("bad").fingerprint == before
    keys = {dg.AssetCheckKey(dg.AssetKey(a), n) for a, n in (name.split(":") for name in SOURCE_CHECKS)}
    declared = prx_defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection=keys)
    assert _passed(declared.execute_in_process(instance=instance, partition_key="bad")) == dict.fromkeys(SOURCE_CHECKS, True)
    spec.write_text(spec.read_text().replace("max_error_share: 0.34", "max_error_share: 0.3"))
    again = _checks(declared.execute_in_process(instance=instance, partition_key="bad"))
    assert not again["raw_samples:ingest_error_share"].passed  # 2 of 6 > 0.3: worse than declared
    assert again["raw_samples:ingest_error_share"].metadata["max_share"].value == 0.3

    corpus = auto.run(None, CORPUS)
    assert corpus.success
    share = _checks(corpus)["skip_lists:skipped_share_per_stream"]
    assert not share.passed and share.severity == dg.AssetCheckSeverity.WARN
    assert share.metadata["over_limit"].value  # 3 copies of 7 samples in good's bucket
    examples = share.metadata["examples"].value  # which samples, and why, for each stream over
    assert set(examples) == set(share.metadata["over_limit"].value) and all(examples.values())
    assert share.metadata["guide"].value.startswith("docs/") and (REPO / share.metadata["guide"].value.split("#")[0]).exists()

    # A usable row that the exports table lost.
    paths = StoragePaths.from_settings(get_settings())
    exports = lance.dataset(paths.exports_table("good"))
    lost = exports.to_table(columns=["sample_id"], filter="shard IS NOT NULL").column("sample_id")[0].as_py()
    exports.delete(f"sample_id = '{lost}'")
    check = dg.AssetCheckKey(dg.AssetKey("mds_shards"), "usable_rows_accounted")
    only_check = prx_defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection={check})
    evaluation = _checks(only_check.execute_in_process(instance=instance, partition_key="good"))[check.to_user_string()]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert evaluation.metadata["missing"].value == 1 and evaluation.metadata["examples"].value == {"missing": [lost]}

    # Shards a trainer cannot read: an error, and skip_lists (blocked by it) is not rewritten.
    mds_root = get_settings().mds_root
    for ref in list_buckets(mds_root):
        for shard in (data_root / "mds").glob(f"{ref.rel}/*/*shard.*.mds"):  # <run>.<tag>.shard.NNNNN.mds
            shard.write_bytes(b"\0" * shard.stat().st_size)
    corpus = auto.run(None, CORPUS)
    streams = _checks(corpus)["corpus_index:bucket_streams_readable"]
    assert not streams.passed and streams.severity == dg.AssetCheckSeverity.ERROR
    assert "512/512x512" in streams.metadata["unreadable"].value
    assert "corpus_index" in _materialized(corpus) and "skip_lists" not in _materialized(corpus)
    assert not corpus.success


def test_fragment_count_fails_past_the_target(data_root, instance, monkeypatch):
    """A table written with a smaller fragment target than the one configured now (or appended
    to many times) has more fragments than its rows need."""
    write_folder_source(data_root, "frag", 5)
    instance.add_dynamic_partitions("sources", ["frag"])
    monkeypatch.setenv("PRX_ROWS_PER_FRAGMENT", "2")
    get_settings.cache_clear()
    small = Automation(build_defs(), instance).run("frag", ["raw_samples"])
    assert _passed(small)["raw_samples:fragment_count"] is True  # 3 fragments, target 2 rows

    monkeypatch.delenv("PRX_ROWS_PER_FRAGMENT")
    get_settings.cache_clear()
    defs = build_defs()
    check = dg.AssetCheckKey(dg.AssetKey("raw_samples"), "fragment_count")
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection={check})
    evaluation = _checks(job.execute_in_process(instance=instance, partition_key="frag"))[check.to_user_string()]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert (evaluation.metadata["fragments"].value, evaluation.metadata["max_fragments"].value) == (3, 2)


def test_unpublished_streams_are_not_counted(data_root, prx_defs, instance):
    """A bucket too sparse to publish is streamed by no trainer: its skipped share is no warning."""
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            "skip_lists",
            metadata={
                "skipped_share_per_stream": dg.MetadataValue.json({"768x1360": 1.0, "512x512": 0.02}),
                "unpublished_buckets": dg.MetadataValue.json({"1024/768x1360": {"samples": 3, "unskipped": 0}}),
            },
        )
    )
    check = dg.AssetCheckKey(dg.AssetKey("skip_lists"), "skipped_share_per_stream")
    job = prx_defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(), asset_check_selection={check})
    evaluation = _checks(job.execute_in_process(instance=instance))[check.to_user_string()]
    assert evaluation.passed
    assert (evaluation.metadata["streams"].value, evaluation.metadata["unpublished_not_counted"].value) == (1, 1)
