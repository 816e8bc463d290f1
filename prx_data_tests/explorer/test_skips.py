"""The sidecar index follows the files: changed, added, removed and broken sidecars."""

from __future__ import annotations

import json
import os
from pathlib import Path

from prx_data.explorer.skips import SkipIndex

A, B, C = "a" * 32, "b" * 32, "c" * 32


def _sidecar(root: Path, reason_token: str, reason: str, indices: list[int], ids: list[str], kept=None) -> Path:
    stream = root / "1024" / "1024x1024" / "web"
    stream.mkdir(parents=True, exist_ok=True)
    # Only committed streams (with an index) count, as for the loader.
    (stream / "index.json").write_text('{"version": 2, "shards": []}')
    obj = {
        "format": "prx-skiplist",
        "version": 1,
        "shard": "shard.00000.mds",
        "reason": reason,
        "shard_samples": 10,
        "indices": indices,
        "sample_ids": ids,
    }
    if kept:
        obj["kept_sample_ids"] = kept
    path = stream / f"shard.00000.mds.skip.{reason_token}.json"
    path.write_text(json.dumps(obj))
    return path


def test_follows_changes_by_mtime(tmp_path):
    index = SkipIndex(str(tmp_path), ttl_s=0)
    assert index.snapshot().by_sample == {}
    dedup = _sidecar(tmp_path, "dedup", "dedup", [1, 4], [A, B], kept=[C, C])
    snap = index.snapshot()
    assert set(snap.by_sample) == {A, B}
    [entry] = snap.reasons(A)
    assert (entry.reason, entry.shard, entry.index_in_shard, entry.kept_sample_id) == ("dedup", "1024/1024x1024/web/shard.00000.mds", 1, C)
    assert entry.sidecar == "1024/1024x1024/web/shard.00000.mds.skip.dedup.json"

    _sidecar(tmp_path, "label_3Ansfw", "label:nsfw", [1], [A])
    assert {e.reason for e in index.snapshot().reasons(A)} == {"dedup", "label:nsfw"}
    assert index.snapshot().samples_per_reason() == {"dedup": 2, "label:nsfw": 1}

    _sidecar(tmp_path, "dedup", "dedup", [4], [B])
    st = dedup.stat()
    os.utime(dedup, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert {e.reason for e in index.snapshot().reasons(A)} == {"label:nsfw"}

    dedup.unlink()
    assert not index.snapshot().is_skipped(B)


def test_unchanged_sidecars_are_not_parsed_again(tmp_path, monkeypatch):
    _sidecar(tmp_path, "dedup", "dedup", [1], [A])
    index = SkipIndex(str(tmp_path), ttl_s=0)
    first = index.snapshot()
    import prx_data.explorer.skips as skips

    def fail(data, path, *args):
        raise AssertionError(f"re-read {path}")

    monkeypatch.setattr(skips, "parse_sidecar", fail)
    assert index.snapshot() is first


def test_broken_sidecar_is_reported_not_fatal(tmp_path):
    _sidecar(tmp_path, "dedup", "dedup", [1], [A])
    bad = tmp_path / "1024" / "1024x1024" / "web" / "shard.00000.mds.skip.label_3Atext.json"
    bad.write_text("{not json")
    snap = SkipIndex(str(tmp_path), ttl_s=0).snapshot()
    assert snap.is_skipped(A)
    assert len(snap.errors) == 1 and str(bad) in snap.errors[0]
