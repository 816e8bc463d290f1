"""Ablation views through the product's path: a corpus the stage functions built (local and
moto S3), views written as files, built by ``prx-data views build`` or by the opt-out refresh
(the same corpus-wide sequence the ``skip_lists`` asset runs), read back by ``make_loader``.

The corpus: sources ``alpha`` and ``beta`` hold the same pictures 2 and 3 (byte-identical),
each also holds pictures of its own; ``gamma`` holds half-size copies (tier 512) of pictures
0 and 4, which the default cut's dedup drops for the tier-1024 originals, and picture 6 (so the
default cut publishes its bucket: a view trains only buckets the default cut publishes).
"""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest
import yaml

from prx_data_tests.curation.optout_world import Item, World

CAPTION = re.compile(r"^photo (?P<key>\S+) of (?P<source>\S+)")


@pytest.fixture(autouse=True)
def _clean_streaming():
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    yield
    gc.collect()
    clean_stale_shared_memory()


def _world(storage_root, tmp_path: Path, monkeypatch) -> World:
    world = World.on_root(storage_root, tmp_path / "world", monkeypatch)
    world.sources["alpha"] = {f"a{i}": Item((i, "exact"), f"https://a.example.org/{i}.jpg") for i in (0, 1, 2, 3)}
    world.sources["beta"] = {f"b{i}": Item((i, "exact"), f"https://b.example.org/{i}.jpg") for i in (2, 3, 4, 5)}
    world.sources["gamma"] = {f"g{i}": Item((i, "half"), f"https://cdn.example.net/{i}.jpg") for i in (0, 4, 6)}
    for name in world.sources:
        world.chain(name)
    world.merge()
    # The CLI reads the same roots and folders from the environment.
    monkeypatch.setenv("PRX_DATA_ROOT", str(world.root))
    monkeypatch.setenv("PRX_LANCE_ROOT", world.lance_root)
    monkeypatch.setenv("PRX_MDS_ROOT", world.mds_root)
    monkeypatch.setenv("PRX_SOURCES_DIR", str(world.root / "sources"))
    monkeypatch.setenv("PRX_OPTOUT_DIR", world.optout_dir)
    monkeypatch.setenv("PRX_VIEWS_DIR", str(world.root / "views"))
    monkeypatch.setenv("PRX_MIN_STREAM_SAMPLES", "1")
    monkeypatch.setenv("PRX_FOLD_SPARSE_BUCKETS", "0")
    for name, value in (storage_root.server.env() if storage_root.server else {}).items():
        monkeypatch.setenv(name, value)
    _refresh(world)
    return world


def _refresh(world: World):
    """``prx-data optout apply``'s sequence: requests, the default cut, then every view."""
    from prx_data.curation.refresh import refresh

    return refresh(
        world.paths,
        world.optout_dir,
        world.priorities(),
        exclude_labels=(),
        options=world.options,
        write_card=False,
        views_dir=str(world.root / "views"),
    )


def _view(world: World, name: str, **spec) -> Path:
    folder = world.root / "views"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **spec}))
    return path


def _cli(*argv: str) -> int:
    from prx_data.app.cli import main
    from prx_data.core.settings import get_settings

    get_settings.cache_clear()
    try:
        return main(list(argv))
    finally:
        get_settings.cache_clear()


def _loader(world: World, tmp_path: Path, view: str | None, **kwargs):
    from prx_data.training.loader import make_loader

    cache = tmp_path / f"cache-{view}-{len(list(tmp_path.glob('cache-*')))}"
    return make_loader(
        world.mds_root,
        batch_size=1,
        view=view,
        storage_options=world.options,
        cache_dir=str(cache) if world.options else None,
        views_dir=str(world.root / "views"),
        **kwargs,
    )


def _yielded(world: World, tmp_path: Path, view: str | None, **kwargs) -> list[tuple[str, str]]:
    """(source, key) of every sample the loader yields under ``view``, in order."""
    loader = _loader(world, tmp_path, view, shuffle=False, **kwargs)
    try:
        out = []
        for batch in loader:
            for caption in batch["caption"]:
                match = CAPTION.match(caption)
                assert match, caption
                out.append((match["source"], match["key"]))
        return out
    finally:
        del loader
        gc.collect()


def _pictures(world: World, yielded: list[tuple[str, str]]) -> list[int]:
    return sorted(world.sources[source][key].variant[0] for source, key in yielded)


def test_a_view_excluding_a_source_keeps_every_picture_an_included_source_holds(storage_root, tmp_path, monkeypatch, capsys):
    world = _world(storage_root, tmp_path, monkeypatch)
    default = _yielded(world, tmp_path, None)
    assert _pictures(world, default) == [0, 1, 2, 3, 4, 5, 6]  # one copy of each picture
    _view(world, "no-alpha", exclude={"sources": ["alpha"]})
    _view(world, "no-beta", description="beta left out", exclude={"sources": ["beta"]})
    assert _cli("views", "build") == 0
    out = capsys.readouterr().out
    assert "view no-alpha:" in out and "view no-beta:" in out
    from prx_data.core.storage import locate, read_bytes
    from prx_data.export.tree import view_card_path

    card = read_bytes(locate(view_card_path(world.mds_root, "no-beta"), world.options)).decode()
    assert card.startswith("# Data card: view no-beta") and "## Skip lists, by reason" in card and "| view:source |" in card

    for left_out, kept in (("alpha", ("beta", "gamma")), ("beta", ("alpha", "gamma"))):
        got = _yielded(world, tmp_path, f"no-{left_out}")
        assert all(source != left_out for source, _ in got)
        # Every picture an included source holds is trained, once: dedup decided inside the view.
        held = sorted({item.variant[0] for source in kept for item in world.sources[source].values()})
        assert _pictures(world, got) == held
    # The default cut is untouched, and a plain reader of a bucket still sees it.
    assert _yielded(world, tmp_path, None) == default

    assert _cli("views") == 0
    listing = capsys.readouterr().out
    assert re.search(r"no-alpha: \d+ trainable sample\(s\).*view:source \d+.*fresh", listing), listing
    assert _cli("views", "diff", "default", "no-beta") == 0
    diff = capsys.readouterr().out
    assert "in default, not in no-beta" in diff and "view:source" in diff and "from source beta" in diff


def test_a_view_that_drops_a_tier_trains_the_copies_the_default_cut_deduplicated(storage_root, tmp_path, monkeypatch):
    world = _world(storage_root, tmp_path, monkeypatch)
    assert ("gamma", "g0") not in _yielded(world, tmp_path, None)  # the 512 copy lost to the 1024 original
    _view(world, "only-512", exclude={"tiers": [1024]})
    _view(world, "no-dedup", readmit=["dedup"])
    _view(world, "wide", exclude={"where": "width >= 10000"})
    _view(world, "long-captions", exclude={"min_caption_words": 4})
    _refresh(world)
    assert sorted(_yielded(world, tmp_path, "only-512")) == [("gamma", "g0"), ("gamma", "g4"), ("gamma", "g6")]
    every = sorted((source, key) for source, items in world.sources.items() for key in items)
    assert sorted(_yielded(world, tmp_path, "no-dedup")) == every
    from prx_data.training.loader import make_loader

    # A view that leaves nothing to train fails like an empty corpus, naming the streams.
    with pytest.warns(UserWarning, match="every sample is skipped"), pytest.raises(ValueError, match="nothing to train"):
        make_loader(world.mds_root, batch_size=1, view="wide", storage_options=world.options)
    # "photo a0 of alpha (captioner 0)": 6 words; the rule is on the row caption column.
    assert len(_yielded(world, tmp_path, "long-captions")) == len(_yielded(world, tmp_path, None))
    _view(world, "long-captions", exclude={"min_caption_words": 7})
    _refresh(world)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="nothing to train"):
        make_loader(world.mds_root, batch_size=1, view="long-captions", storage_options=world.options)


def test_opt_outs_hold_in_every_view_after_a_reingest_and_cannot_be_readmitted(storage_root, tmp_path, monkeypatch, capsys):
    world = _world(storage_root, tmp_path, monkeypatch)
    _view(world, "no-alpha", exclude={"sources": ["alpha"]})
    _view(world, "no-dedup", readmit=["dedup"])
    # Picture 2 (in alpha and beta) is opted out by its image: every copy, every source.
    image = world.root / "requester.jpg"
    from prx_data_tests.curation.optout_world import variant_bytes

    image.write_bytes(variant_bytes(2, "exact"))
    (Path(world.optout_dir) / "req-1.yaml").write_text(yaml.safe_dump({"id": "req-1", "image_files": [str(image)]}))
    _refresh(world)
    for view in (None, "no-alpha", "no-dedup"):
        assert 2 not in _pictures(world, _yielded(world, tmp_path, view)), view
    # A new source lands with another copy, and alpha is ingested again: the views follow.
    world.sources["delta"] = {
        "d2": Item((2, "reencode"), "https://b.example.org/d2.jpg"),
        "d9": Item((9, "exact"), "https://b.example.org/9.jpg"),
    }
    world.chain("delta")
    world.sources["alpha"]["a7"] = Item((7, "exact"), "https://a.example.org/7.jpg")
    world.chain("alpha")
    world.merge()
    _refresh(world)
    for view in (None, "no-alpha", "no-dedup"):
        pictures = _pictures(world, _yielded(world, tmp_path, view))
        assert 2 not in pictures and 9 in pictures, (view, pictures)
    # Re-admitting an opt-out is refused by name; the other views still build.
    bad = _view(world, "readmit-optout", readmit=["optout:req-1"])
    assert _cli("views", "build") == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "'readmit'" in err and "never re-admit an opted-out" in err
    assert 2 not in _pictures(world, _yielded(world, tmp_path, "no-alpha"))
    from prx_data.training.views import ViewNotReadyError

    with pytest.raises(ViewNotReadyError, match="readmit-optout"):
        _loader(world, tmp_path, "readmit-optout")


def test_a_view_with_a_seed_gives_the_same_order_twice_and_resumes_mid_epoch(storage_root, tmp_path, monkeypatch):
    world = _world(storage_root, tmp_path, monkeypatch)
    _view(world, "no-beta", exclude={"sources": ["beta"]})
    assert _cli("views", "build", "no-beta") == 0

    def drain(dataset, limit=None):
        out = []
        for sample in dataset:
            out.append(sample["sample_id"])
            if limit is not None and len(out) == limit:
                break
        return out

    first = _loader(world, tmp_path, "no-beta", shuffle=True, shuffle_seed=11).dataset
    full = drain(first)
    del first
    again = _loader(world, tmp_path, "no-beta", shuffle=True, shuffle_seed=11).dataset
    assert drain(again) == full and len(set(full)) == len(full) == 6
    del again
    head_ds = _loader(world, tmp_path, "no-beta", shuffle=True, shuffle_seed=11).dataset
    head = drain(head_ds, limit=2)
    state = head_ds.state_dict(num_samples=2, from_beginning=False)
    del head_ds
    gc.collect()
    tail_ds = _loader(world, tmp_path, "no-beta", shuffle=True, shuffle_seed=11).dataset
    tail_ds.load_state_dict(state)
    assert head + drain(tail_ds) == full


def test_the_loader_refuses_a_view_unknown_stale_or_edited(storage_root, tmp_path, monkeypatch):
    from prx_data.training.views import ViewNotReadyError

    world = _world(storage_root, tmp_path, monkeypatch)
    with pytest.raises(ViewNotReadyError, match="'nowhere' has not been built"):
        _loader(world, tmp_path, "nowhere")
    path = _view(world, "no-beta", exclude={"sources": ["beta"]})
    assert _cli("views", "build") == 0
    assert _yielded(world, tmp_path, "no-beta")
    # The view file changes: stale until rebuilt.
    path.write_text(path.read_text() + "description: edited\n")
    with pytest.raises(ViewNotReadyError, match="'no-beta' is stale: .*changed since"):
        _loader(world, tmp_path, "no-beta")
    assert _cli("views", "build", "no-beta") == 0
    assert _yielded(world, tmp_path, "no-beta")
    # A new export without a views rebuild: refused, never the default cut instead.
    world.sources["alpha"]["a8"] = Item((8, "exact"), "https://a.example.org/8.jpg")
    world.chain("alpha")
    world.merge()
    with pytest.raises(ViewNotReadyError, match="'no-beta' is stale"):
        _loader(world, tmp_path, "no-beta")
    _refresh(world)
    assert 8 in _pictures(world, _yielded(world, tmp_path, "no-beta"))


def test_bad_view_files_fail_alone_with_the_file_and_field_named(tmp_path, monkeypatch, capsys):
    from prx_data_tests.storage_parity import make_root

    world = _world(make_root("local", tmp_path / "root", None), tmp_path, monkeypatch)
    good = _view(world, "good", exclude={"sources": ["beta"], "labels": ["nope"]})
    folder = world.root / "views"
    (folder / "broken.yaml").write_text("name: broken\nexclude: [not, a, mapping\n")
    (folder / "typo.yaml").write_text("name: typo\nexclude:\n  soruces: [web]\n")
    (folder / "where-syntax.yaml").write_text("name: where-syntax\nexclude:\n  where: 'width >> 3'\n")
    (folder / "where-column.yaml").write_text("name: where-column\nexclude:\n  where: \"colour = 'red'\"\n")
    (folder / "misnamed.yaml").write_text("name: other\n")
    assert _cli("views", "build") == 1
    err = capsys.readouterr().err
    assert f"{folder / 'broken.yaml'}: not valid YAML" in err
    assert "typo.yaml: field 'exclude.soruces': unknown field" in err
    assert "where-syntax.yaml: field 'exclude.where': predicate does not parse" in err
    assert "where-column.yaml: field 'exclude.where': unknown column(s) 'colour'" in err
    assert "misnamed.yaml: field 'name': 'other' differs from the file name 'misnamed'" in err
    assert f"view file {good}: field 'exclude.labels': 'nope' not in the corpus (known:" in err
    # The good view was built and trains; the default cut is unaffected.
    assert {source for source, _ in _yielded(world, tmp_path, "good")} == {"alpha", "gamma"}
    assert _pictures(world, _yielded(world, tmp_path, None)) == [0, 1, 2, 3, 4, 5, 6]
    # The default cut's own build lists, checks and removes only its files: the view still trains.
    from prx_data.curation.refresh import refresh

    refresh(world.paths, world.optout_dir, world.priorities(), exclude_labels=(), write_card=False)
    assert {source for source, _ in _yielded(world, tmp_path, "good")} == {"alpha", "gamma"}
    # Lineage names each view that skips a sample, and why.
    from prx_data.core.ids import sample_id

    assert _cli("lineage", "--id", sample_id("beta", "b5")) == 0
    assert re.search(r"view\s+good skips it: view:source", capsys.readouterr().out)
    # A view whose file leaves the folder is retired with the next corpus-wide run.
    good.unlink()
    rebuilt = _refresh(world)
    assert rebuilt.views is not None and rebuilt.views.retired == ["good"]
    assert not list((Path(world.mds_root)).rglob("*.view-good.*"))
