"""Replaced shards stay for the retention, counted from the merge that stopped publishing them
(not from their write time, and not reset by later merges); ``prx-data gc`` deletes only what is
past it. Local and s3:// roots, on exports written as the pipeline writes them."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from datetime import datetime, timedelta

from prx_data.app.cli import main
from prx_data.core.settings import get_settings
from prx_data.core.storage import glob_files, locate, read_bytes, write_bytes
from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import write_partition
from prx_data.export.tree import SUPERSEDED_BASENAME, SUPERSEDED_DIR
from prx_data_tests.export.trainable import SMALL, _samples

BUCKET = "512/512x512"


def _objects(root: str, options) -> set[str]:
    return set(glob_files(locate(root, options), "*", recursive=True))


def test_replaced_shards_wait_for_the_retention_then_gc_deletes_them(storage_root, tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("PRX_") and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    root = storage_root.uri("mds")
    options = storage_root.options
    first = write_partition(_samples("alpha", 0), mds_root=root, source="alpha", storage_options=options, config=SMALL)
    merge_all(root, options)
    old = {name for name in _objects(root, options) if f"/{first.run_id}." in name}
    if storage_root.kind == "local":  # written days ago: the write time must not matter
        stamp = time.time() - 30 * 86400
        for name in old:
            os.utime(os.path.join(root, name), (stamp, stamp))
    second = write_partition(_samples("alpha", 0), mds_root=root, source="alpha", storage_options=options, config=SMALL)
    for _ in range(3):  # a run's two merges, and the next run's, at the default retention
        merge_all(root, options)
    assert old <= _objects(root, options)
    bucket = locate(root, options).child(*BUCKET.split("/"))
    recorded = json.loads(read_bytes(bucket.child(SUPERSEDED_BASENAME)))["objects"]
    assert {f"{BUCKET}/{name}" for name in recorded if name.startswith("alpha/")} == {n for n in old if n.startswith(BUCKET)}
    assert any(name.startswith(f"{SUPERSEDED_DIR}/index.") for name in recorded)  # the replaced merged index, kept

    storage_root_env = {"PRX_MDS_ROOT": root, "PRX_LANCE_ROOT": storage_root.uri("lance")}
    if storage_root.server:
        storage_root_env.update(storage_root.server.env())
    for name, value in storage_root_env.items():
        monkeypatch.setenv(name, value)
    data = tmp_path / "data"
    data.mkdir()

    def gc(*extra: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["gc", "--root", str(data), *extra]) == 0
        get_settings.cache_clear()
        return out.getvalue()

    assert "deleted 0 object(s)" in gc()  # the default retention: 7 days
    assert old <= _objects(root, options)
    # Eight days later (the recorded times moved back): past the retention, collected.
    aged = {name: (datetime.fromisoformat(when) - timedelta(days=8)).isoformat() for name, when in recorded.items()}
    write_bytes(bucket.child(SUPERSEDED_BASENAME), json.dumps({"format": "prx-superseded", "version": 1, "objects": aged}).encode())
    out = gc("--retention-days", "7")
    left = _objects(root, options)
    assert not {n for n in old if n.startswith(BUCKET)} & left, out
    assert {n for n in old if not n.startswith(BUCKET)} <= left  # other buckets' times were not aged
    assert not [n for n in left if n.startswith(f"{BUCKET}/{SUPERSEDED_DIR}/")]
    assert f"{BUCKET}/alpha/{second.run_id}." in "".join(sorted(left))  # the published export is untouched
