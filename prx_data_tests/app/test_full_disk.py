"""A full disk under the MDS root: ``prx-data run`` fails the export once (no step retry) and its
summary names the cause and the file (not "Exceeded max_retries of 2"); ``prx-data optout
apply`` prints one error line naming them, no traceback.

The disk is real: a tmpfs of a few MB mounted as the MDS root (tests run as root in CI), filled
up by a file, so the errors are the kernel's own ENOSPC as the writers (Python's, pyarrow's)
meet them. Where mounting is not allowed the test is skipped, saying so."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import dagster as dg
import pytest
from PIL import Image

from prx_data.app.cli import main
from prx_data.core.settings import get_settings


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / "mds"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _photos(folder: Path, first: int, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + count):
        # Noise: JPEG cannot shrink it, so a few images fill a few MB.
        Image.effect_noise((512, 512), 60).convert("RGB").save(folder / f"p{i}.jpg", quality=90)
        (folder / f"p{i}.txt").write_text(f"a noisy picture number {i}")


def _fill(folder: Path) -> None:
    with contextlib.suppress(OSError), open(folder / "filler", "wb", buffering=0) as handle:
        while True:
            handle.write(b"\0" * 65536)


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    get_settings.cache_clear()
    return code, out.getvalue(), err.getvalue()


def test_full_disk_fails_once_naming_the_cause(tmp_path: Path, monkeypatch, small_disk: Path):
    root = tmp_path / "data"
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    _photos(root / "photos", 0, 6)
    (root / "sources" / "photos.yaml").write_text("name: photos\nshape: image_folder\nlocation: ../photos\nlicense: CC0-1.0\n")
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PRX_MDS_ROOT", str(small_disk))
    get_settings.cache_clear()

    code, out, err = _cli("run", "--root", str(root))
    assert code == 0, out + err
    assert "exported=6" in out, out

    _fill(small_disk)
    code, out, err = _cli("optout", "add", "--root", str(root), "--id", "req-1", "--key", "photos:p0.jpg")
    assert code == 0, err
    code, out, err = _cli("optout", "apply", "--root", str(root))
    assert code == 1, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ") and "No space left on device" in lines[0] and str(small_disk) in lines[0], err

    _photos(root / "photos", 6, 4)  # new rows to export onto the full disk
    code, out, err = _cli("run", "--root", str(root))
    assert code != 0
    failures = [line for line in out.splitlines() if "FAILED in" in line]
    assert len(failures) == 1 and "FAILED in mds_shards" in failures[0], out
    failed = failures[0]
    assert "No space left on device" in failed and str(small_disk) in failed, failed
    assert "max_retries" not in out, out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        failed_runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], job_name="source_pipeline"))
        assert len(failed_runs) == 1
        events = instance.all_logs(failed_runs[0].run_id)
        retried = [e for e in events if e.dagster_event and e.dagster_event.event_type_value == "STEP_UP_FOR_RETRY"]
    assert retried == [], "a full disk was retried"

    (small_disk / "filler").unlink()  # space freed: the next run completes
    code, out, err = _cli("run", "--root", str(root))
    assert code == 0, out + err
