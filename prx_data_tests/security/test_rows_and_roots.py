"""Rows that are not valid images keep no bytes (a spec with a wide root cannot copy files into
the table), and a root wider than the spec's folder is warned about where specs are listed."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import dagster as dg

from prx_data_tests import images

SECRET = b"root:x:0:0:a-line-that-must-never-be-stored-in-a-table\n"


def _spec_dir(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    (specs / "meta").mkdir(parents=True)
    return specs


def test_non_image_rows_keep_no_bytes(storage_root, tmp_path: Path):
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry

    specs = _spec_dir(tmp_path)
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    meta = specs / "meta"
    (meta / "ok.jpg").write_bytes(images.jpeg(320, 240, seed=5))
    (meta / "pic.gif").write_bytes(images.animated_gif())
    (meta / "big.jpg").write_bytes(images.jpeg(900, 900, seed=6))
    records = [
        {"id": "ok", "p": "ok.jpg"},
        {"id": "passwd", "p": str(secret)},
        {"id": "gif", "p": "pic.gif"},
        {"id": "big", "p": "big.jpg"},
    ]
    pq.write_table(pa.Table.from_pylist(records), meta / "items.parquet")
    # root: / is the widest a spec can ask for; formats and max_bytes make the other statuses.
    (specs / "wide.yaml").write_text(
        "name: wide\nshape: parquet\nlocation: meta/items.parquet\nroot: /\nformats: [JPEG]\n"
        f"max_bytes: {(meta / 'big.jpg').stat().st_size - 1}\n"
        "fields: {key: id, image: p, image_kind: path}\n"
    )
    source = load_registry(str(specs)).get("wide")
    uri = storage_root.uri("lance", "sources", "wide.lance")
    ingest_source(source, uri, storage_options=storage_root.options)
    table = lance.dataset(uri, storage_options=storage_root.options).to_table(columns=["source_key", "status", "image_sha256"])
    status = dict(zip(table.column("source_key").to_pylist(), table.column("status").to_pylist()))
    assert status == {"ok": "ok", "passwd": "invalid_image", "gif": "unsupported_format", "big": "too_large"}
    ds = lance.dataset(uri, storage_options=storage_root.options)
    keys = ds.to_table(columns=["source_key"]).column("source_key").to_pylist()
    blobs = ds.take_blobs("image", indices=list(range(len(keys))))
    kept = {k for k, b in zip(keys, blobs) if b is not None and b.size() > 0}
    assert kept == {"ok"}
    # The fingerprint of a refused file stays (its sha256), its bytes do not, anywhere.
    sha = dict(zip(table.column("source_key").to_pylist(), table.column("image_sha256").to_pylist()))
    assert sha["passwd"] is not None
    assert not [rel for rel, blob in storage_root.files("lance").items() if SECRET in blob]


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _write_specs(specs: Path) -> None:
    (specs / "narrow.yaml").write_text("name: narrow\nshape: image_folder\nlocation: meta\nroot: meta\n")
    (specs / "wide.yaml").write_text("name: wide\nshape: image_folder\nlocation: meta\nroot: /\n")


def test_sources_command_warns_about_a_wide_root(tmp_path: Path, monkeypatch):
    from prx_data.app.cli import main
    from prx_data.core.settings import get_settings

    specs = _spec_dir(tmp_path)
    _write_specs(specs)
    monkeypatch.setenv("PRX_SOURCES_DIR", str(specs))
    get_settings.cache_clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["sources"]) == 0
    get_settings.cache_clear()
    warnings = [line for line in out.getvalue().splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "'wide'" in warnings[0] and "root /" in warnings[0]


def test_registry_sensor_tick_warns_about_a_wide_root(tmp_path: Path):
    from prx_data.defs.ingest.sensors import source_registry_sensor
    from prx_data.defs.resources import SourceRegistryResource, StorageResource

    specs = _spec_dir(tmp_path)
    _write_specs(specs)
    registry = SourceRegistryResource(sources_dir=str(specs), optout_dir=str(tmp_path / "optout"))
    records: list[logging.LogRecord] = []
    collect = _Collect(records)
    with dg.instance_for_test() as instance:
        storage = StorageResource(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds"))
        context = dg.build_sensor_context(instance=instance, resources={"registry": registry, "storage": storage})
        context.log.addHandler(collect)  # the tick's log, as the daemon stores it
        source_registry_sensor(30)(context)
    lines = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any("'wide'" in m and "wider than the spec's folder" in m for m in lines), lines
    assert not any("'narrow'" in m for m in lines)
