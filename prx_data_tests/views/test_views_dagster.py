"""Views in the corpus-wide graph: the ``skip_lists`` asset rebuilds every view after the default
cut, its metadata has each view's counts, and a bad view file fails the ``view_files_valid``
check by name while the other views are built and train."""

from __future__ import annotations

import gc

import dagster as dg
import pytest

from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_skip_lists_builds_the_views_and_a_bad_file_fails_its_check_alone(data_root, prx_defs, instance):
    from prx_data.training.loader import make_loader

    world = World(root=data_root, lance_root=str(data_root / "lance"), mds_root=str(data_root / "mds"))
    world.sources["alpha"] = {f"a{i}": Item((i, "exact"), f"https://a.example.org/{i}.jpg") for i in (0, 1, 2)}
    world.sources["beta"] = {f"b{i}": Item((i, "exact"), f"https://b.example.org/{i}.jpg") for i in (2, 3)}
    for name in world.sources:
        world.chain(name)
    world.merge()
    views = data_root / "views"
    views.mkdir()
    (views / "no-beta.yaml").write_text("name: no-beta\nexclude:\n  sources: [beta]\n")
    (views / "bad.yaml").write_text("name: bad\nreadmit: ['optout:req-1']\n")

    check = dg.AssetCheckKey(dg.AssetKey("skip_lists"), "view_files_valid")
    job = prx_defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection={dg.AssetKey("skip_lists")}, asset_check_selection={check}
    )
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    meta = result.asset_materializations_for_node("skip_lists")[0].metadata
    assert meta["views"].value["no-beta"]["per_rule"] == {"view:source": 2}
    assert meta["views"].value["no-beta"]["trainable"] == 3
    assert list(meta["view_errors"].value) == [str(views / "bad.yaml")]
    (evaluation,) = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert not evaluation.passed and str(views / "bad.yaml") in evaluation.description
    assert "never re-admit an opted-out" in evaluation.metadata["bad_view_files"].value[str(views / "bad.yaml")]

    loader = make_loader(world.mds_root, batch_size=1, shuffle=False, view="no-beta")
    captions = sorted(c for batch in loader for c in batch["caption"])
    del loader
    gc.collect()
    assert [c.split()[1] for c in captions] == ["a0", "a1", "a2"]
