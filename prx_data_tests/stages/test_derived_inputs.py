"""Derived values follow their inputs: an edited source caption reaches the caption, the label,
the export and what the training loader yields; exactly the edited rows are redone; tables made
before the input fingerprints existed upgrade without redoing what was already right.

On local and s3:// (moto) roots, with the real stages (ingest, phash, the ``source`` captioner,
MiniLM labels, export) and the real loader.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pytest

from prx_data.core.ids import sample_id
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KEYS = ("a", "b", "c", "d")


class SourceCaptionWorld(World):
    """The opt-out world with the production caption and label stages."""

    def caption(self, name: str, run_id: str | None = None) -> dict:
        from prx_data.stages.caption_stage import compute_captions
        from prx_data.stages.label_stage import compute_labels

        uri = self.paths.raw_table(name)
        cap = compute_captions(uri, {"backend": "source"}, executor="local", storage_options=self.options, run_id=run_id)
        lab = compute_labels(uri, {"backend": "minilm"}, executor="local", storage_options=self.options, run_id=run_id)
        self.last = {"captioned": cap.processed, "labelled": lab.processed, "changed": cap.extra.get("inputs_changed")}
        return self.last


def _world(storage_root, tmp_path: Path, monkeypatch) -> SourceCaptionWorld:
    for name, value in storage_root.streaming_env().items():
        monkeypatch.setenv(name, value)
    world = SourceCaptionWorld(
        root=tmp_path / "data",
        lance_root=storage_root.uri("lance"),
        mds_root=storage_root.uri("mds"),
        options=storage_root.options,
    )
    world.sources["s1"] = {k: Item((i, "exact"), f"https://a.example.org/{k}.jpg") for i, k in enumerate(KEYS)}
    return world


def _run(world: SourceCaptionWorld) -> dict:
    world.write_source("s1")
    world.ingest("s1")
    counts = world.caption("s1")
    world.export("s1")
    world.merge()
    world.rebuild_skip_lists()
    return counts


def _table(world: World) -> dict[str, dict]:
    ds = lance.dataset(world.paths.raw_table("s1"), storage_options=world.options)
    cols = ["sample_id", "source_caption", "caption", "label", "caption_input_fp", "label_input_fp", "phash_input_fp"]
    return {r["sample_id"]: r for r in ds.to_table(columns=cols).to_pylist()}


def test_an_edited_caption_reaches_training_and_only_edited_rows_are_redone(storage_root, tmp_path, monkeypatch):
    world = _world(storage_root, tmp_path, monkeypatch)
    first = _run(world)
    assert first["captioned"] == len(KEYS) and first["labelled"] == len(KEYS)

    world.captions[("s1", "a")] = "a red square on a wooden table"
    world.captions[("s1", "c")] = "a handwritten menu board with prices"
    second = _run(world)
    # Exactly the two edited rows are re-captioned and re-labelled.
    assert second == {"captioned": 2, "labelled": 2, "changed": 2}

    rows = _table(world)
    for key in KEYS:
        assert rows[sample_id("s1", key)]["caption"] == world.caption_of("s1", key)
    yielded = world.yielded_samples(tmp_path / "cache")
    assert sorted(s["sample_id"] for s in yielded) == sorted(sample_id("s1", k) for k in KEYS)  # each once
    by_id = {s["sample_id"]: s for s in yielded}
    assert by_id[sample_id("s1", "a")]["caption"] == "a red square on a wooden table"
    assert by_id[sample_id("s1", "c")]["caption"] == "a handwritten menu board with prices"
    assert all(by_id[sid]["label"] == rows[sid]["label"] for sid in by_id)

    # Nothing changed: nothing is redone.
    assert _run(world) == {"captioned": 0, "labelled": 0, "changed": 0}

    # A caption removed: the row has no caption any more, so it is not exported.
    world.captions[("s1", "b")] = None
    third = _run(world)
    assert third["captioned"] == 1
    assert _table(world)[sample_id("s1", "b")]["caption"] is None
    assert sample_id("s1", "b") not in {s["sample_id"] for s in world.yielded_samples(tmp_path / "cache2")}


def test_tables_from_before_fingerprints_upgrade_without_needless_work(storage_root, tmp_path, monkeypatch):
    """A table whose derived columns predate ``*_input_fp``: phashes and labels (already right
    under the old code) adopt a fingerprint without being redone; ``source`` captions are redone
    once (the old code left them stale after an edit) and are then current."""
    world = _world(storage_root, tmp_path, monkeypatch)
    _run(world)
    uri = world.paths.raw_table("s1")
    ds = lance.dataset(uri, storage_options=world.options)
    ds.drop_columns(["caption_input_fp", "label_input_fp", "phash_input_fp"])
    # What the old code left: an edit that reached source_caption but not the caption.
    world.captions[("s1", "d")] = "an edited caption the old code never used"

    from prx_data.stages.phash_stage import compute_phashes

    world.write_source("s1")
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    ingest_source(load_registry(world.root / "sources").get("s1"), uri, storage_options=world.options)
    phash = compute_phashes(uri, executor="local", storage_options=world.options)
    assert phash.processed == 0 and phash.extra["fingerprints_adopted"] == len(KEYS)
    counts = world.caption("s1")
    # Every source caption is redone once; labels whose caption did not change are adopted.
    assert counts["captioned"] == len(KEYS)
    assert counts["labelled"] == 1  # the one caption that changed
    rows = _table(world)
    assert rows[sample_id("s1", "d")]["caption"] == "an edited caption the old code never used"
    assert all(r["caption_input_fp"] and r["label_input_fp"] and r["phash_input_fp"] for r in rows.values())
    assert world.caption("s1") == {"captioned": 0, "labelled": 0, "changed": 0}
