"""Values from the data cannot forge a log line: a file name holding a newline and an escape
sequence is logged by raw_samples (through the real Dagster job) on one line, escaped."""

from __future__ import annotations

import dagster as dg
import pytest

from prx_data_tests.conftest import run_source
from prx_data_tests.images import photo_like

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
FORGED = "INFO - prx_data - all rows ok"


def test_a_file_name_with_a_newline_stays_on_one_escaped_log_line(data_root, prx_defs, instance):
    photos = data_root / "photos"
    photos.mkdir()
    photo_like(64, 48, seed=1).save(photos / "ok.jpg", "JPEG", quality=90)
    (photos / f"bad.jpg\n{FORGED}\x1b[2K.jpg").write_bytes(b"not an image")
    (data_root / "sources" / "photos.yaml").write_text("name: photos\nshape: image_folder\nlocation: ../photos\n")
    result = run_source(prx_defs, instance, "photos", selection=[dg.AssetKey("raw_samples")])
    assert result.success
    messages = [r.user_message for r in instance.all_logs(result.run_id) if r.user_message]
    logged = [m for m in messages if "bad.jpg" in m]
    assert logged, messages
    assert all("\n" not in m and "\x1b" not in m for m in logged)
    assert any("bad.jpg\\nINFO - prx_data - all rows ok\\x1b[2K.jpg" in m for m in logged)
