"""A Parquet cell or a JSONL line over the source's limit is refused before it becomes a Python
object: the row says ``too_large`` naming the column or line, the other rows are ingested, and
the Python heap of the run grows by far less than the oversized value (before, the value was
copied into a Python ``bytes`` first: a 16 MB cell cost 16 MB more heap, a JSONL line up to
its limit). Through ``ingest_source`` on a local root and on moto S3 (storage_parity); the heap
is bounded on the local root, where nothing else allocates in this process (moto serves S3 from
it)."""

from __future__ import annotations

import io
import json
import os
import tracemalloc

import lance
import pyarrow as pa
import pyarrow.parquet as pq

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images

HUGE = 16 * 1024 * 1024
LIMIT = 1024 * 1024  # max_bytes of the Parquet source
JPEG = images.jpeg(16, 16, seed=5)


def _ingest(storage_root, tmp_path, name: str, shape: str, location: str, max_bytes: int, fields: dict) -> tuple[int, dict]:
    spec = SourceSpec(name=name, shape=shape, location=location, max_bytes=max_bytes, fields=fields)
    source = RegisteredSource(spec, tmp_path / f"{name}.yaml")
    uri = storage_root.uri("lance", f"{name}.lance")
    tracemalloc.start()
    try:
        ingest_source(source, uri, storage_options=storage_root.options, source_storage_options=storage_root.options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    table = lance.dataset(uri, storage_options=storage_root.options).to_table(columns=["source_key", "status", "error"])
    return peak, {k: (s, e) for k, s, e in zip(*(table.column(c).to_pylist() for c in ("source_key", "status", "error")))}


def _parquet(rows: list[tuple[str, bytes]]) -> bytes:
    sink = io.BytesIO()
    table = pa.table({"id": [k for k, _ in rows], "img": pa.array([v for _, v in rows], pa.binary()), "c": [f"c {k}" for k, _ in rows]})
    pq.write_table(table, sink, row_group_size=4)
    return sink.getvalue()


def test_parquet_cell_over_max_bytes_is_refused_before_python_sees_it(storage_root, tmp_path):
    rows = [(f"r{i}", JPEG) for i in range(6)]
    fields = {"key": "id", "image": "img", "caption": "c"}
    small = storage_root.put("pq-small", "rows.parquet", data=_parquet(rows))
    base, _ = _ingest(storage_root, tmp_path, "small", "parquet", small, LIMIT, fields)
    rows[2] = ("r2", os.urandom(HUGE))
    huge = storage_root.put("pq-huge", "rows.parquet", data=_parquet(rows))
    peak, got = _ingest(storage_root, tmp_path, "huge", "parquet", huge, LIMIT, fields)
    status, error = got["r2"]
    assert status == "too_large" and "column 'img'" in error and f"{HUGE} bytes" in error and "rows.parquet" in error, error
    assert {k: s for k, (s, _) in got.items() if k != "r2"} == {f"r{i}": "ok" for i in range(6) if i != 2}
    if storage_root.kind == "local":  # moto serves from this process: its heap would count too
        assert peak - base < HUGE // 4, f"the Python heap grew by {(peak - base) / 2**20:.1f} MB for one refused cell"


def test_jsonl_line_over_the_limit_is_skipped_without_being_held(storage_root, tmp_path):
    max_bytes = 8 * 1024 * 1024  # lines of up to ~11.7 MB (base64 of max_bytes plus metadata)
    fields = {"key": "id", "image": "img", "image_kind": "path", "caption": "c"}
    lines = [json.dumps({"id": f"k{i}", "img": f"missing{i}.jpg", "c": f"caption {i}"}) for i in range(5)]
    lines[4] = json.dumps({"id": "k4", "img": "missing4.jpg", "c": "long " * 600_000})  # 3 MB: read in pieces, kept
    small = storage_root.put("jl-small", "list.jsonl", data=("\n".join(lines) + "\n").encode())
    base, _ = _ingest(storage_root, tmp_path, "jsmall", "jsonl", small, max_bytes, fields)
    lines[2] = json.dumps({"id": "k2", "img": "x" * (2 * max_bytes), "c": "huge"})
    huge = storage_root.put("jl-huge", "list.jsonl", data=("\n".join(lines) + "\n").encode())
    peak, got = _ingest(storage_root, tmp_path, "jhuge", "jsonl", huge, max_bytes, fields)
    status, error = got["list.jsonl:3"]
    assert status == "too_large" and "line 3 of list.jsonl is longer than" in error, error
    assert sorted(got) == ["k0", "k1", "k3", "k4", "list.jsonl:3"] and got["k4"][0] == "missing"
    if storage_root.kind == "local":
        assert peak - base < 4 * 1024 * 1024, f"the Python heap grew by {(peak - base) / 2**20:.1f} MB for one skipped line"
