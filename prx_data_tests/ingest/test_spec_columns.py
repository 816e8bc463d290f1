"""A spec naming a column a Parquet file does not have (a typo, a file of another layout): one
error row for the file, naming the setting and the file's columns, and the other files proceed.
Before, a misspelt caption or license field left every caption empty without a word, and a
misspelt image field wrote one ``missing`` row per record. On a local root and on moto S3."""

from __future__ import annotations

import io
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images


def _parquet(rows: list[dict]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def test_a_column_the_spec_names_but_a_file_lacks_is_one_error_row_for_that_file(storage_root, tmp_path: Path):
    good = _parquet([{"id": f"a{i}", "img": images.jpeg(seed=i), "caption": f"photo {i}"} for i in range(3)])
    other = _parquet([{"id": f"b{i}", "img": images.jpeg(seed=10 + i), "text": f"photo {i}"} for i in range(4)])
    storage_root.put("sources", "parquet", "good.parquet", data=good)
    storage_root.put("sources", "parquet", "other.parquet", data=other)
    location = storage_root.uri("sources", "parquet")
    spec = SourceSpec(name="pq", shape="parquet", location=location, fields={"key": "id", "image": "img", "caption": "caption"})
    uri = storage_root.uri("pq.lance")
    stats = ingest_source(RegisteredSource(spec, tmp_path / "pq.yaml"), uri, storage_options=storage_root.options)

    rows = (
        lance.dataset(uri, storage_options=storage_root.options)
        .to_table(columns=["source_key", "status", "error", "source_caption"])
        .to_pylist()
    )
    by_key = {r["source_key"]: r for r in rows}
    assert sorted(by_key) == ["a0", "a1", "a2", "other.parquet:unreadable"]
    assert all(by_key[f"a{i}"]["status"] == "ok" and by_key[f"a{i}"]["source_caption"] == f"photo {i}" for i in range(3))
    error = by_key["other.parquet:unreadable"]
    assert error["status"] == "invalid_record"
    assert "fields.caption 'caption'" in error["error"] and "'text'" in error["error"], error["error"]
    assert stats.rows_by_status["ok"] == 3


def test_a_jsonl_field_empty_in_every_record_is_named_in_a_warning(storage_root, tmp_path: Path):
    """JSONL has no schema to check: a misspelt ``caption:`` gives ok rows without captions.
    The run now names the field once; a field only some records leave empty is not named."""
    import base64
    import json

    lines = [{"id": f"k{i}", "b64": base64.b64encode(images.jpeg(seed=i)).decode(), "text": f"photo {i}" if i else None} for i in range(3)]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    location = storage_root.put("sources", "list.jsonl", data=body)

    def run(caption_field: str, table: str):
        fields = {"key": "id", "image": "b64", "caption": caption_field}
        spec = SourceSpec(name="js", shape="jsonl", location=location, fields=fields)
        return ingest_source(RegisteredSource(spec, tmp_path / "js.yaml"), storage_root.uri(table), storage_options=storage_root.options)

    typo = run("txet", "typo.lance")
    assert typo.rows_by_status["ok"] == 3
    assert "fields.caption 'txet' is empty in all 3 records read: a misspelt field name?" in typo.warnings, typo.warnings
    right = run("text", "right.lance")
    assert not [w for w in right.warnings if "fields.caption" in w], right.warnings
