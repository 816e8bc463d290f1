"""Colour-faithful export, through ``prx-data run`` on a local and an s3:// root: Display P3,
Adobe RGB (JPEG and PNG) and profiled-CMYK versions of one photo export within a small colour
difference of the sRGB original's export (and the same files taken as sRGB would not); an
sRGB-tagged copy takes the fast path and exports the original's exact bytes; a broken profile is
recorded, not fatal; the raw table, the data card and lineage name each colour space."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import dagster as dg
import lance
import numpy as np
import pytest
from PIL import Image, ImageCms
from skimage import data as skdata
from skimage.color import deltaE_ciede2000, rgb2lab

from prx_data.app.cli import main
from prx_data.core.settings import get_settings
from prx_data.core.storage import locate, read_bytes
from prx_data.demo import icc
from prx_data.export.reuse import ShardReader, source_indexes
from prx_data.export.tree import data_card_path
from prx_data.imaging.colour import ADOBE_RGB, DISPLAY_P3, INVALID, NONE, SRGB

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

SOURCE = "colour"
MAX_MEAN_DELTA_E = 2.0
CMYK_NAME = "other:prx test CMYK"


def photo() -> Image.Image:
    """A natural photo with saturated colours (scikit-image's bundled coffee cup)."""
    return Image.fromarray(skdata.coffee()).convert("RGB").resize((640, 480), Image.Resampling.LANCZOS)


def jpeg(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95, subsampling="4:4:4", **options)
    return buffer.getvalue()


def variants() -> dict[str, tuple[bytes, str]]:
    """File name -> (bytes, the colour space the raw table must record)."""
    original = photo()
    p3, adobe, cmyk = icc.display_p3_profile(), icc.adobe_rgb_profile(), icc.cmyk_profile()
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    in_p3 = icc.convert_photo(original, p3)
    return {
        "original.jpg": (jpeg(original), NONE),
        "tagged_srgb.jpg": (jpeg(original, icc_profile=srgb), SRGB),
        "p3.jpg": (icc.encode_with_profile(in_p3, p3), DISPLAY_P3),
        "p3_png.png": (icc.encode_with_profile(in_p3, p3, "PNG"), DISPLAY_P3),
        "adobe.jpg": (icc.encode_with_profile(icc.convert_photo(original, adobe), adobe), ADOBE_RGB),
        "cmyk.jpg": (icc.encode_with_profile(icc.to_cmyk(original), cmyk), CMYK_NAME),
        "broken.jpg": (jpeg(original, icc_profile=b"not an ICC profile at all"), INVALID),
    }


def as_srgb(data: bytes) -> bytes:
    """The file's pixels as plain decoding gives them (the profile ignored), as a JPEG."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return jpeg(image.convert("RGB"))


def write_source(root: Path, files: dict[str, bytes]) -> None:
    (root / "sources").mkdir(parents=True, exist_ok=True)
    (root / "optout").mkdir(exist_ok=True)
    folder = root / "photos"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
        (folder / f"{Path(name).stem}.txt").write_text(f"a cup of coffee, {name}")
    (root / "sources" / f"{SOURCE}.yaml").write_text(
        f"name: {SOURCE}\nshape: image_folder\nlocation: ../photos\npriority: 1\nlicense: CC0-1.0\n"
    )


def lab(jpeg_bytes: bytes) -> np.ndarray:
    return rgb2lab(np.asarray(Image.open(io.BytesIO(jpeg_bytes)).convert("RGB"), dtype=np.float64) / 255.0)


def mean_delta_e(a: bytes, b: bytes) -> float:
    return float(deltaE_ciede2000(lab(a), lab(b)).mean())


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    get_settings.cache_clear()
    return code, out.getvalue()


def exported_images(lance_root: str, mds_root: str, options: dict | None, scratch: Path) -> dict[str, bytes]:
    """source_key -> the exported JPEG bytes, read back from the published shards."""
    raw = lance.dataset(f"{lance_root}/sources/{SOURCE}.lance", storage_options=options)
    keys = dict(zip(*raw.to_table(columns=["sample_id", "source_key"]).to_pydict().values()))
    exports = lance.dataset(f"{lance_root}/exports/{SOURCE}.lance", storage_options=options).to_table().to_pylist()
    placed = {r["sample_id"]: (r["shard"], r["index_in_shard"]) for r in exports if r["shard"]}
    assert len(placed) == len(exports), [r for r in exports if not r["shard"]]
    reader = ShardReader(mds_root, source_indexes(mds_root, SOURCE, options), SOURCE, str(scratch), options)
    where = {v: k for k, v in placed.items()}
    return {keys[where[(shard, index)]]: sample["image"] for shard, index, sample in reader.read(placed.values())}


# The prepared files are the same for both roots.
@pytest.fixture(scope="module")
def files() -> dict[str, tuple[bytes, str]]:
    return variants()


def test_profiled_photos_export_as_srgb_through_prx_data_run(storage_root, files, tmp_path, monkeypatch, data_root):
    root = tmp_path / "data"
    write_source(root, {name: data for name, (data, _) in files.items()})
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    lance_root, mds_root = str(root / "lance"), str(root / "mds")
    if storage_root.kind == "s3":
        lance_root, mds_root = storage_root.uri("lance"), storage_root.uri("mds")
        for name, value in storage_root.server.env(PRX_LANCE_ROOT=lance_root, PRX_MDS_ROOT=mds_root).items():
            monkeypatch.setenv(name, value)
    get_settings.cache_clear()

    code, out = _cli("run", "--root", str(root))
    assert code == 0, out
    # The export's line in the run log says how many of the source's rows it holds.
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        messages = [event.user_message for run in instance.get_runs() for event in instance.all_logs(run.run_id)]
    assert f"exported {len(files)}/{len(files)} rows ({len(files)} encoded, 0 re-used, 0 kept in place)" in messages

    # Every row's colour space is recorded; the broken profile's reason with it, none dropped.
    raw = lance.dataset(f"{lance_root}/sources/{SOURCE}.lance", storage_options=storage_root.options)
    rows = {r["source_key"]: r for r in raw.to_table(columns=["source_key", "status", "colour_space", "colour_error"]).to_pylist()}
    assert {k: r["colour_space"] for k, r in rows.items()} == {name: space for name, (_, space) in files.items()}
    assert all(r["status"] == "ok" for r in rows.values())
    assert "ICC profile does not parse" in rows["broken.jpg"]["colour_error"]
    assert all(r["colour_error"] is None for k, r in rows.items() if k != "broken.jpg")

    exported = exported_images(lance_root, mds_root, storage_root.options, tmp_path / "scratch")
    assert set(exported) == set(files), "every version is exported, the broken profile's too"
    baseline = exported["original.jpg"]
    # The fast path: an sRGB-tagged file exports exactly what the untagged one does.
    assert exported["tagged_srgb.jpg"] == baseline
    assert mean_delta_e(exported["broken.jpg"], baseline) < 0.5, "a broken profile: the pixels are used as sRGB"
    # Each profiled version lands within a small colour difference of the original's export,
    # closer than its pixels taken as sRGB; P3 and Adobe RGB taken as sRGB are visibly off.
    from prx_data.imaging.transform import prepare

    for name in ("p3.jpg", "p3_png.png", "adobe.jpg", "cmyk.jpg"):
        converted = mean_delta_e(exported[name], baseline)
        naive = prepare(as_srgb(files[name][0]))
        ignored = mean_delta_e(naive.jpeg, baseline)  # type: ignore[union-attr]
        assert converted < MAX_MEAN_DELTA_E, (name, converted)
        assert converted < ignored, (name, converted, ignored)
        if name != "cmyk.jpg":
            assert ignored > MAX_MEAN_DELTA_E, (name, ignored)

    # The data card counts the colour spaces of the source.
    card = read_bytes(locate(data_card_path(mds_root), storage_root.options)).decode()
    assert "## Colour spaces" in card
    for space, count in ((NONE, 1), (SRGB, 1), (DISPLAY_P3, 2), (ADOBE_RGB, 1), (CMYK_NAME, 1), (INVALID, 1)):
        assert f"| {SOURCE} | {space} | {count} |" in card, (space, card)

    # Lineage shows the colour space, and the broken profile's reason.
    code, out = _cli("lineage", "--key", f"{SOURCE}:p3.jpg", "--root", str(root))
    assert code == 0, out
    assert f"colour     {DISPLAY_P3}" in out, out
    code, out = _cli("lineage", "--key", f"{SOURCE}:broken.jpg", "--json", "--root", str(root))
    assert code == 0, out
    (record,) = json.loads(out)
    assert record["row"]["colour_space"] == INVALID and "does not parse" in record["row"]["colour_error"]


def test_exports_made_before_colour_spaces_redo_exactly_the_profiled_rows(files, data_root, tmp_path):
    """A table exported before colour spaces were read (older code: sRGB pixels assumed) gets
    its colour spaces on the next run; the export then re-encodes the converted rows only, through
    its changed-row path (new placements, the old ones superseded), and then nothing."""
    from prx_data.core.paths import StoragePaths
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry
    from prx_data.stages.colour_stage import read_colour_spaces
    from prx_data.stages.export_stage import export_source
    from prx_data.stages.phash_stage import compute_phashes

    write_source(data_root, {name: data for name, (data, _) in files.items()})
    settings = get_settings()
    paths = StoragePaths.from_settings(settings)
    uri = paths.raw_table(SOURCE)
    ingest_source(load_registry(settings.sources_dir).get(SOURCE), uri)
    compute_phashes(uri, executor="local")

    def export(require_caption: bool = False):
        return export_source(
            uri,
            SOURCE,
            mds_root=settings.mds_root,
            exports_uri=paths.exports_table(SOURCE),
            executor="local",
            scratch_dir=str(tmp_path),
            require_caption=require_caption,  # the captions stage is not part of this test
            rewrite_share=0.9,  # keep the bucket: on 7 rows, 4 superseded would rewrite it
        )

    # Rows dropped at planning are named in the run's line, with their reasons.
    uncaptioned = export(require_caption=True)
    assert (
        uncaptioned.summary
        == f"exported 0 of {len(files)} rows ({len(files)} dropped: no_caption {len(files)}; 0 encoded, 0 re-used, 0 kept in place)"
    )
    first = export()
    assert first.encoded == len(files) and "colour_space" not in lance.dataset(uri).schema.names
    read = read_colour_spaces(uri, executor="local")
    assert (read.processed, read.failed) == (len(files), 1)  # the broken profile
    converted = {name for name, (_, space) in files.items() if space not in (NONE, SRGB, INVALID)}
    second = export()
    assert (second.encoded, second.kept, second.superseded) == (len(converted), len(files) - len(converted), len(converted))
    assert second.summary == f"exported {len(files)}/{len(files)} rows (4 encoded, 0 re-used, 3 kept in place)"
    third = export()
    assert (third.encoded, third.changed) == (0, False)
    assert read_colour_spaces(uri, executor="local").processed == 0
