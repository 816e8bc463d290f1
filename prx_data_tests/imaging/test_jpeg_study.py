from __future__ import annotations

import math
from pathlib import Path

import pytest
from PIL import Image

from prx_data.imaging.jpeg_study import band_of, image_files, main, measure_image, study
from prx_data_tests.imaging.helpers import jpeg_bytes, photo, png_bytes


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    for index in range(3):
        (root / f"photo{index}.jpg").write_bytes(jpeg_bytes(photo(index, 5, (0.3, 0.45)), 95))
    (root / "nested").mkdir()
    (root / "nested" / "small.png").write_bytes(png_bytes(photo(4, 5, (0.05, 0.06))))
    (root / "broken.jpg").write_bytes(b"not a jpeg")
    (root / "notes.txt").write_text("ignored")
    return root


def test_bands() -> None:
    assert band_of(250_000) == "0.25-0.5 MP" and band_of(500_000) == "0.25-0.5 MP"
    assert band_of(1_500_000) == "1-2 MP"
    assert band_of(700_000) == "other" and band_of(100) == "other"


def test_measures_are_plausible(folder: Path) -> None:
    report = study(image_files(folder))
    assert len(report.measures) == 4 and len(report.errors) == 1
    assert report.errors[0][1].startswith("invalid_image")
    for m in report.measures:
        assert 30 < m.psnr_first < 60
        assert m.psnr_last <= m.psnr_first + 0.5  # re-encoding never gets closer to the original
        assert m.psnr_last > m.psnr_first - 3  # q92 is stable under re-encoding
        assert m.jpeg_size < m.png_size  # photos: JPEG q92 is smaller than PNG
    assert sorted(m.band for m in report.measures) == ["0.25-0.5 MP"] * 3 + ["other"]


def test_lossless_case_is_infinite_psnr() -> None:
    flat = jpeg_bytes(Image.new("RGB", (64, 64), (128, 128, 128)))
    measure = measure_image(flat, cycles=2)
    assert measure.psnr_first == math.inf or measure.psnr_first > 50


def test_cli_prints_a_table_per_band(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(folder), "--cycles", "3", "--verbose"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "5 image file(s)" in out
    for label in ("0.25-0.5 MP", "1-2 MP", "other", "PSNR 1x q92", "PSNR 3x", "JPEG/PNG size"):
        assert label in out
    assert "1 file(s) not decodable" in out and "skipped" in out


def test_cli_rejects_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing")])
