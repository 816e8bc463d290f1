"""Parallel ingest (Ray tasks writing Lance fragments, one driver commit) on an s3:// root."""

from __future__ import annotations

from pathlib import Path

import lance

from prx_data.ingest.driver import ingest_source
from prx_data_tests.ingest.test_parallel_ingest import LAYOUT, content, shards, wds


def test_two_workers_on_s3_match_one_worker_locally_and_catch_duplicates(tmp_path: Path, s3_server, s3_bucket):
    storage = s3_server.options()
    layout = {k: list(v) for k, v in LAYOUT.items()}
    layout["part-2.tar"].append(("t0-k1", 55, "a duplicate of part-0's key"))
    shards(tmp_path / "wds", layout)
    local = str(tmp_path / "local.lance")
    remote = f"s3://{s3_bucket}/lance/shards.lance"

    a = ingest_source(wds(tmp_path), local, workers=1)
    b = ingest_source(wds(tmp_path), remote, workers=2, storage_options=storage)
    assert a.duplicate_key_count == b.duplicate_key_count == 1 and b.new == 12
    assert content(local) == content(remote, storage)

    (tmp_path / "wds" / "part-1.tar").unlink()
    b = ingest_source(wds(tmp_path), remote, workers=2, storage_options=storage)
    assert b.removed == 4 and lance.dataset(remote, storage_options=storage).count_rows() == 8
