"""A source of thousands of one-record JSONL files: consecutive small files are read as one unit
(a group), each file is still recorded on its own in the unit manifest, so a re-run with one
changed file opens that file only, and a key duplicated across files keeps its first occurrence
whichever file changed. Real Lance, on a local root and on moto S3 (storage_parity)."""

from __future__ import annotations

import base64
import json
import os

import lance

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.read import units as units_module
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images

FIRST_DUP, LATER_DUP = 100, 450
JPEG = base64.b64encode(images.jpeg(16, 16, seed=3)).decode()


def _name(i: int) -> str:
    return f"{i // 500:02d}/{i:05d}.jsonl"


def _record(i: int, caption: str | None = None) -> bytes:
    key = "dup" if i in (FIRST_DUP, LATER_DUP) else f"k{i}"
    return (json.dumps({"id": key, "img": JPEG, "c": caption or f"caption {i}"}) + "\n").encode()


def _rows(uri: str, options) -> dict[str, str]:
    table = lance.dataset(uri, storage_options=options).to_table(columns=["source_key", "source_caption"])
    return dict(zip(table.column("source_key").to_pylist(), table.column("source_caption").to_pylist()))


def test_small_files_are_grouped_and_a_changed_file_rereads_only_itself(storage_root, tmp_path, monkeypatch):
    # Fewer on moto, whose every object costs a request of a few ms to write and to read.
    count = 2000 if storage_root.kind == "local" else 500
    for i in range(count):
        storage_root.put("lines", _name(i), data=_record(i))
    spec = SourceSpec(
        name="many",
        shape="jsonl",
        location=storage_root.uri("lines") + "/**/*.jsonl",
        fields={"key": "id", "image": "img", "caption": "c"},
    )
    source = RegisteredSource(spec, tmp_path / "many.yaml")
    uri, options = storage_root.uri("lance", "many.lance"), storage_root.options
    opened: list[str] = []
    real_read = units_module.read_jsonl_file

    def counting(ctx, file, *args, **kwargs):
        opened.append(str(file).rsplit("/", 2)[-2] + "/" + str(file).rsplit("/", 1)[-1])
        return real_read(ctx, file, *args, **kwargs)

    monkeypatch.setattr(units_module, "read_jsonl_file", counting)

    def run():
        opened.clear()
        return ingest_source(source, uri, storage_options=options, source_storage_options=options, workers=1)

    def change(i: int, caption: str) -> None:
        place = storage_root.put("lines", _name(i), data=_record(i, caption))
        if storage_root.kind == "local":
            os.utime(place, ns=(1, 2 + i))  # a new mtime whatever the clock's resolution

    first = run()
    assert len(opened) == count
    assert first.units * 100 <= count or first.units == 1, f"{first.units} units for {count} files: small files are not grouped"
    assert (first.new, first.duplicate_key_count) == (count - 1, 1)
    rows = _rows(uri, options)
    assert len(rows) == count - 1 and rows["dup"] == f"caption {FIRST_DUP}" and rows["k7"] == "caption 7"

    again = run()
    assert (again.units, again.objects_unchanged, again.unchanged, again.new) == (0, count, count - 1, 0)
    assert opened == []

    change(7, "edited seven")
    edited = run()
    assert opened == [_name(7)]
    assert (edited.units, edited.objects_unchanged, edited.metadata_updated, edited.unchanged) == (1, count - 1, 1, count - 2)
    assert _rows(uri, options)["k7"] == "edited seven"

    # The later duplicate changed: read alone, it still loses to the kept first occurrence.
    change(LATER_DUP, "later duplicate edited")
    later = run()
    assert opened[0] == _name(LATER_DUP) and set(opened) == {_name(LATER_DUP)}
    assert later.duplicate_key_count == 1 and _rows(uri, options)["dup"] == f"caption {FIRST_DUP}"

    # The first occurrence changed: it wins against the kept later one (read again to skip it).
    change(FIRST_DUP, "first duplicate edited")
    earlier = run()
    assert set(opened) == {_name(FIRST_DUP), _name(LATER_DUP)}
    assert earlier.duplicate_key_count == 1
    rows = _rows(uri, options)
    assert len(rows) == count - 1 and rows["dup"] == "first duplicate edited" and rows["k7"] == "edited seven"

    settled = run()
    assert (settled.new, settled.updated, settled.metadata_updated, settled.duplicate_key_count) == (0, 0, 0, 1), settled
    assert _rows(uri, options) == rows
