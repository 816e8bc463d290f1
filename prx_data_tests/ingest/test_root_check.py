"""``wide_root_warning`` speaks of local roots only: an object-store root (a URI, which the
registry keeps as a str) used to crash it (``str`` has no ``resolve``)."""

from pathlib import Path

from prx_data.ingest.registry import load_registry, wide_root_warning


def _source(folder: Path, text: str):
    (folder / "src.yaml").write_text(text)
    reg = load_registry(folder)
    assert not reg.errors, reg.errors
    return reg.get("src")


def test_an_object_store_root_gets_no_warning(tmp_path):
    source = _source(tmp_path, "name: src\nshape: image_folder\nlocation: s3://bucket/photos\nroot: s3://bucket\n")
    assert source.resolve_root() == "s3://bucket"
    assert wide_root_warning(source) is None


def test_a_local_root_wider_than_the_spec_folder_is_named(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    source = _source(specs, "name: src\nshape: image_folder\nlocation: photos\nroot: ..\n")
    warning = wide_root_warning(source)
    assert warning is not None and str(tmp_path.resolve()) in warning
    assert wide_root_warning(_source(specs, "name: src\nshape: image_folder\nlocation: photos\nroot: photos\n")) is None
