"""A caption past the export's length cap drops its sample as ``caption_too_long`` (recorded in
the exports table like every drop reason) instead of being exported; shortening the caption
exports it on the next run. Local and s3:// roots, the real export and loader."""

from __future__ import annotations

import lance
import pytest

from prx_data.core.ids import sample_id
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _drops(world: World) -> dict[str, str | None]:
    ds = lance.dataset(world.paths.exports_table("s1"), storage_options=world.options)
    return {r["sample_id"]: r["drop_reason"] for r in ds.to_table(columns=["sample_id", "drop_reason"]).to_pylist()}


def test_a_900kb_caption_is_dropped_not_exported(storage_root, tmp_path, monkeypatch):
    world = World.on_root(storage_root, tmp_path / "data", monkeypatch)
    world.sources["s1"] = {k: Item((i, "exact"), f"https://a.example.org/{k}.jpg") for i, k in enumerate("abc")}
    world.captions[("s1", "b")] = "word " * 180_000  # 900 KB of caption
    world.chain("s1")
    world.merge()
    world.rebuild_skip_lists()
    drops = _drops(world)
    assert (drops[sample_id("s1", "b")] or "").startswith("caption_too_long")
    assert drops[sample_id("s1", "a")] is None and drops[sample_id("s1", "c")] is None
    assert {s["sample_id"] for s in world.yielded_samples(tmp_path / "c1")} == {sample_id("s1", "a"), sample_id("s1", "c")}

    world.captions[("s1", "b")] = "a short caption again"
    world.chain("s1")
    world.merge()
    world.rebuild_skip_lists()
    assert _drops(world)[sample_id("s1", "b")] is None
    yielded = {s["sample_id"]: s["caption"] for s in world.yielded_samples(tmp_path / "c2")}
    assert yielded[sample_id("s1", "b")].startswith("a short caption again")


def test_the_cap_is_configurable(tmp_path):
    from prx_data.stages.export_stage import export_source

    with pytest.raises(ValueError, match="max_caption_chars"):
        export_source(
            str(tmp_path / "t.lance"), "s1", mds_root=str(tmp_path / "mds"), exports_uri=str(tmp_path / "e.lance"), max_caption_chars=0
        )
