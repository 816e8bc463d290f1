"""Ingest on Ray (issue 16, point 5): input units read by parallel tasks that write Lance
fragments, one commit by the driver, ids joined in Arrow.

Real readers, probe, Lance and Ray (the session's shared head) on small sources under tmp_path.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prx_data.ingest import unit_tasks
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.plan import unit_listing
from prx_data.ingest.read import parquet
from prx_data.ingest.read.units import Unit, read_unit
from prx_data.ingest.read.whole_source import read_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images

pytestmark = pytest.mark.timeout(180)

COLUMNS = ["sample_id", "source_key", "image_sha256", "status", "error", "source_caption", "license", "source_url", "width", "height"]


def _units(src: RegisteredSource, **kwargs: Any) -> list[Unit]:
    """The units of a first run: no manifest, so none is kept from an earlier one."""
    listed = list(unit_listing.list_units(src, **kwargs))
    units = [u for u in listed if isinstance(u, Unit)]
    assert len(units) == len(listed)
    return units


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def shards(folder: Path, layout: dict[str, list[tuple[str, int, str]]]) -> None:
    """layout: tar name -> [(key, image seed, caption)]."""
    folder.mkdir(exist_ok=True)
    for tar, rows in layout.items():
        members = {}
        for key, seed, caption in rows:
            members[f"{key}.jpg"] = images.jpeg(64, 48, seed=seed)
            members[f"{key}.json"] = json.dumps({"caption": caption, "license": "cc-by"}).encode()
        write_tar(folder / tar, members)


def wds(tmp_path: Path, **extra) -> RegisteredSource:
    spec = SourceSpec(name="shards", shape="webdataset", location=str(tmp_path / "wds"), **extra)
    return RegisteredSource(spec, tmp_path / "shards.yaml")


def content(uri: str, storage_options: dict | None = None) -> list[dict]:
    table = lance.dataset(uri, storage_options=storage_options).to_table(columns=COLUMNS)
    return sorted(table.to_pylist(), key=lambda r: r["sample_id"])


LAYOUT = {f"part-{t}.tar": [(f"t{t}-k{i}", 10 * t + i, f"caption {t}/{i}") for i in range(4)] for t in range(3)}


def test_two_workers_write_the_same_table_as_one_first_run_and_rerun(tmp_path: Path):
    shards(tmp_path / "wds", LAYOUT)
    one, two = str(tmp_path / "one.lance"), str(tmp_path / "two.lance")
    s1 = ingest_source(wds(tmp_path), one, workers=1)
    s2 = ingest_source(wds(tmp_path), two, workers=2)
    assert (s1.new, s2.new, s1.units, s2.units, s2.workers) == (12, 12, 3, 3, 2)
    assert content(one) == content(two)
    assert len(content(two)) == 12

    # Edits across units: a caption (metadata only), an image (row replaced), a removed key, a new tar.
    layout = {k: list(v) for k, v in LAYOUT.items()}
    layout["part-0.tar"][0] = ("t0-k0", 0, "edited caption")
    layout["part-1.tar"][1] = ("t1-k1", 99, "caption 1/1")
    del layout["part-2.tar"][3]
    layout["part-3.tar"] = [("t3-k0", 70, "new")]
    (tmp_path / "wds" / "part-2.tar").unlink()
    shards(tmp_path / "wds", layout)
    r1 = ingest_source(wds(tmp_path), one, workers=1)
    r2 = ingest_source(wds(tmp_path), two, workers=2)
    for r in (r1, r2):
        assert (r.new, r.updated, r.metadata_updated, r.removed, r.unchanged) == (1, 1, 1, 1, 9)
    assert content(one) == content(two)
    rows = {r["source_key"]: r for r in content(two)}
    assert rows["t0-k0"]["source_caption"] == "edited caption" and "t2-k3" not in rows and "t3-k0" in rows
    assert len(lance.dataset(two).to_table(columns=["sample_id"]).column(0).unique()) == lance.dataset(two).count_rows()

    # Nothing changed: nothing written, the version stays.
    before = lance.dataset(two).version
    again = ingest_source(wds(tmp_path), two, workers=2)
    assert (again.new, again.updated, again.metadata_updated, again.removed, again.unchanged) == (0, 0, 0, 0, 12)
    assert lance.dataset(two).version == before


def test_units_read_exactly_what_the_whole_source_reader_reads(tmp_path: Path, monkeypatch):
    """Folder batches and Parquet row-group runs: same items, same keys, same order."""
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    for i in range(7):
        (folder / ("sub" if i % 2 else "") / f"p{i}.jpg").write_bytes(images.jpeg(32, 32, seed=i))
    (folder / "p0.txt").write_text("a caption")
    (folder / "broken.jpg").write_bytes(b"not an image")
    folder_src = RegisteredSource(SourceSpec(name="photos", shape="image_folder", location=str(folder)), tmp_path / "p.yaml")
    monkeypatch.setattr(unit_listing, "FOLDER_BATCH", 3)

    table = pa.table({"id": [f"r{i}" for i in range(10)], "img": [images.jpeg(16, 16, seed=i) for i in range(10)]})
    pq.write_table(table, tmp_path / "rows.parquet", row_group_size=3)
    pq_src = RegisteredSource(
        SourceSpec(name="rows", shape="parquet", location=str(tmp_path / "rows.parquet"), fields={"key": "id", "image": "img"}),
        tmp_path / "q.yaml",
    )
    monkeypatch.setattr(unit_listing, "PARQUET_UNIT_ROWS", 4)
    # 8 entries in batches of 3; row groups of 3, 3, 3, 1 rows in runs of at least 4 rows.
    for src, expected_units in ((folder_src, 3), (pq_src, 2)):
        listed = _units(src)
        assert len(listed) == expected_units
        split = [(it.key, it.data, it.caption, it.error) for u in listed for it in read_unit(src, u)]
        whole = [(it.key, it.data, it.caption, it.error) for it in read_source(src)]
        assert split == whole


def test_duplicate_key_across_units_keeps_the_first_occurrence(tmp_path: Path):
    layout = {
        "a.tar": [("dup", 1, "first"), ("a1", 2, "x")],
        "b.tar": [("b1", 3, "y"), ("dup", 4, "second")],
        "c.tar": [("dup", 5, "third")],
    }
    shards(tmp_path / "wds", layout)
    results = {}
    for workers in (1, 2):
        uri = str(tmp_path / f"w{workers}.lance")
        stats = ingest_source(wds(tmp_path), uri, workers=workers)
        assert stats.duplicate_key_count == 2 and stats.duplicate_keys == ["dup", "dup"]
        rows = {r["source_key"]: r for r in content(uri)}
        assert len(content(uri)) == 3 and rows["dup"]["source_caption"] == "first"
        results[workers] = content(uri)
        # A re-run sees the same duplicates and changes nothing.
        again = ingest_source(wds(tmp_path), uri, workers=workers)
        assert (again.duplicate_key_count, again.new, again.updated, again.metadata_updated, again.unchanged) == (2, 0, 0, 0, 3)
    assert results[1] == results[2]


def test_partitioned_id_join_gives_the_same_answers_as_in_memory(tmp_path: Path):
    """Past ``spill_rows`` ids go to hash partitions on disk: duplicates and removals still found."""
    layout = {f"s{t}.tar": [(f"k{i}", i, f"c{i}") for i in range(t * 3, t * 3 + 5)] for t in range(3)}  # overlapping keys
    shards(tmp_path / "wds", layout)
    mem, disk = str(tmp_path / "mem.lance"), str(tmp_path / "disk.lance")
    a = ingest_source(wds(tmp_path), mem, workers=1)
    b = ingest_source(wds(tmp_path), disk, workers=1, spill_rows=2)
    assert a.duplicate_key_count == b.duplicate_key_count == 4
    assert content(mem) == content(disk) and len(content(disk)) == 11
    (tmp_path / "wds" / "s0.tar").unlink()  # k0..k2 leave the source (k3, k4 are also in s1)
    a = ingest_source(wds(tmp_path), mem, workers=1)
    b = ingest_source(wds(tmp_path), disk, workers=1, spill_rows=2)
    assert a.removed == b.removed == 3
    assert content(mem) == content(disk) and len(content(disk)) == 8


def test_run_killed_after_some_units_wrote_fragments_keeps_the_last_version(tmp_path: Path, monkeypatch):
    shards(tmp_path / "wds", LAYOUT)
    uri = str(tmp_path / "t.lance")
    ingest_source(wds(tmp_path), uri, workers=1)
    before, version = content(uri), lance.dataset(uri).version
    data_files = set((tmp_path / "t.lance" / "data").iterdir())

    layout = {k: [(key, seed + 100, cap) for key, seed, cap in v] for k, v in LAYOUT.items()}  # every image changes
    shards(tmp_path / "wds", layout)
    real = unit_tasks.process_unit
    done: list[int] = []

    def dies_on_third_unit(job, unit, skip=frozenset()):
        if len(done) == 2:
            raise KeyboardInterrupt("killed mid-ingest")
        done.append(unit.index)
        return real(job, unit, skip)

    monkeypatch.setattr(unit_tasks, "process_unit", dies_on_third_unit)
    with pytest.raises(KeyboardInterrupt):
        ingest_source(wds(tmp_path), uri, workers=1)
    monkeypatch.setattr(unit_tasks, "process_unit", real)
    assert len(set((tmp_path / "t.lance" / "data").iterdir()) - data_files) >= 2, "two units wrote fragments"
    assert lance.dataset(uri).version == version and content(uri) == before

    stats = ingest_source(wds(tmp_path), uri, workers=2)
    assert (stats.updated, stats.new, stats.removed) == (12, 0, 0)
    after = content(uri)
    assert len(after) == 12 and len({r["sample_id"] for r in after}) == 12
    assert {r["image_sha256"] for r in after}.isdisjoint({r["image_sha256"] for r in before})


def test_url_lists_become_download_sized_units_with_several_workers(tmp_path: Path, monkeypatch):
    """A URL list of 1,100 lines (JSONL) or one 1,100-row group (Parquet) is one unit at its
    default sizes; with workers > 1 it becomes units of URL_UNIT_ITEMS (a row group cut into row
    ranges), each reading exactly its piece of the whole reader's items, keys and order."""
    n = 1100
    records = [{"id": f"k{i}", "u": f"https://img{i % 7}.example/{i}.jpg", "c": f"photo {i}"} for i in range(n)]
    (tmp_path / "urls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "urls.parquet")  # one row group
    fields = {"key": "id", "image": "u", "image_kind": "url", "caption": "c"}
    for shape in ("jsonl", "parquet"):
        src = RegisteredSource(
            SourceSpec(name=f"u{shape}", shape=shape, location=str(tmp_path / f"urls.{shape}"), fields=fields), tmp_path / "u.yaml"
        )
        assert len(_units(src)) == 1
        listed = _units(src, workers=2)
        assert [sum(1 for _ in read_unit(src, u)) for u in listed] == [512, 512, 76], shape
        assert len({u.index for u in listed}) == 3 and [u.index for u in listed] == sorted(u.index for u in listed)
        split = [(it.key, it.url, it.caption) for u in listed for it in read_unit(src, u)]
        assert split == [(it.key, it.url, it.caption) for it in read_source(src)]
        assert [k for k, _, _ in split] == [r["id"] for r in records]
        # The spec's own workers count decides when the caller names none.
        two = RegisteredSource(src.spec.model_copy(update={"workers": 2}), src.path)
        assert len(_units(two)) == 3
    # A huge row group is cut into at most MAX_PIECES_PER_ROW_GROUP pieces (each decodes the rows before it).
    monkeypatch.setattr(parquet, "MAX_PIECES_PER_ROW_GROUP", 2)
    src = RegisteredSource(
        SourceSpec(name="upq", shape="parquet", location=str(tmp_path / "urls.parquet"), fields=fields), tmp_path / "u.yaml"
    )
    assert [u.rows for u in _units(src, workers=2)] == [550, 550]
