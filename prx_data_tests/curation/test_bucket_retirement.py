"""Buckets come and go (issue 22, item 7): remove the only image of a bucket and re-run, and the
bucket is retired (index, manifest, sidecars removed; the stream check passes; the data card
lists it); export into the shape again and it is back. Local and moto S3 roots."""

from __future__ import annotations

import pytest

from prx_data.core.ids import sample_id
from prx_data.curation.refresh import write_data_card
from prx_data.export.corpus_index import retired_buckets
from prx_data.export.stream_check import read_bucket, stream_buckets
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SMALL = "512/512x512"  # where the half-size copy lands, alone


def _stream_check(w: World) -> dict[str, int]:
    """What the blocking `bucket_streams_readable` check does: every stream bucket opens."""
    return {ref.rel: read_bucket(ref.dir(w.mds_root), w.options) for ref in stream_buckets(w.mds_root, w.options)}


def _run(w: World) -> None:
    """A re-run after the source changed: per-source chain, index merge, skip lists."""
    w.chain("s1")
    w.merge()
    w.apply()


def test_an_emptied_bucket_is_retired_and_comes_back(storage_root, tmp_path, monkeypatch):
    w = World.on_root(storage_root, tmp_path / "data", monkeypatch)
    w.sources["s1"] = {
        "a": Item((0, "exact"), "https://a.example.org/a.jpg"),
        "b": Item((1, "exact"), "https://a.example.org/b.jpg"),
        "h": Item((2, "half"), "https://a.example.org/h.jpg"),
    }
    _run(w)
    assert _stream_check(w).get(SMALL) == 1
    # A skip sidecar in the small bucket too (an opt-out of its only image), so there is one to clean.
    (w.root / "optout" / "req-h.yaml").write_text("id: req-h\nsource_keys: ['s1:h']\n")
    w.apply()
    assert any(".skip." in rel for rel in storage_root.files("mds") if rel.startswith(SMALL + "/"))
    (w.root / "optout" / "req-h.yaml").unlink()
    w.apply()  # the request stays in force (vanished file): the bucket is fully skipped
    assert SMALL not in {r.rel for r in stream_buckets(w.mds_root, w.options)}

    del w.sources["s1"]["h"]  # its only image leaves the bucket
    _run(w)
    checked = _stream_check(w)  # the blocking check of every later run: it used to fail here
    assert SMALL not in checked and set(checked.values()) == {2}
    left = [rel for rel in storage_root.files("mds") if rel.startswith(SMALL + "/")]
    assert not [rel for rel in left if rel.endswith(("index.json", "skiplists.json", "unpublished.json")) or ".skip." in rel], left
    record = retired_buckets(w.mds_root, w.options)
    assert set(record) == {SMALL} and record[SMALL]["sources"] == ["s1"]
    card, _ = write_data_card(w.paths, ["s1"], exclude_labels=(), options=w.options)
    retired_section = card.markdown.split("## Retired buckets", 1)[1].split("##", 1)[0]
    assert SMALL in retired_section
    assert {sample_id("s1", "a"), sample_id("s1", "b")} <= w.yielded(tmp_path / "cache1" if w.options else None)

    # A later export into the same shape revives it.
    w.sources["s1"]["h2"] = Item((3, "half"), "https://a.example.org/h2.jpg")
    _run(w)
    assert _stream_check(w).get(SMALL) == 1
    assert retired_buckets(w.mds_root, w.options) == {}
    assert sample_id("s1", "h2") in w.yielded(tmp_path / "cache2" if w.options else None)
