"""``prx-data run`` with nothing changed launches no Dagster run and starts no Ray; a changed file
or spec runs its source again (real Dagster, Lance, Ray through the session's shared head)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from prx_data.app import local_ray
from prx_data.app.cli import main
from prx_data.core.settings import get_settings
from prx_data_tests.app.helpers import tiny_root

REPO = Path(__file__).resolve().parents[2]


def _run(root) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", "--root", str(root)])
    get_settings.cache_clear()
    return code, out.getvalue()


def _run_count(home) -> int:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return len(instance.get_run_records())


def _assert_named_runs_of_the_code_location(home) -> None:
    """The CLI's runs are runs of the workspace's jobs (the Overview timeline groups runs by this
    origin and drops runs without one), tagged as the CLI's, and no daemon retries them."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
    assert sorted(r.job_name for r in runs) == ["corpus", "source_pipeline"]
    for run in runs:
        origin = run.remote_job_origin
        assert origin is not None and origin.location_name == "prx_data", run.job_name
        assert origin.repository_origin.repository_name == "__repository__" and origin.job_name == run.job_name
        assert run.job_code_origin is not None and run.job_code_origin.job_name == run.job_name
        assert run.tags["prx/launched_by"] == "cli" and run.tags["dagster/max_retries"] == "0"
        assert run.status == dg.DagsterRunStatus.SUCCESS
    (source_run,) = [r for r in runs if r.job_name == "source_pipeline"]
    assert source_run.tags["dagster/partition"] == "photos"


def test_no_change_run_launches_nothing_and_changes_run(tmp_path, monkeypatch):
    root = tiny_root(tmp_path / "data")
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code, out = _run(root)
    assert code == 0, out
    assert "[photos] materializing" in out and "[corpus] materializing" in out
    _assert_named_runs_of_the_code_location(home)
    runs = _run_count(home)

    def no_ray(*_a, **_k):
        raise AssertionError("a no-change run started Ray")

    with monkeypatch.context() as m:
        m.delenv("PRX_RAY_ADDRESS", raising=False)  # a start would be a real local head
        m.setattr(local_ray, "start_head", no_ray)
        code, out = _run(root)
    assert code == 0, out
    assert "[photos] inputs unchanged" in out and "[corpus] inputs unchanged" in out
    assert "materializing" not in out
    assert _run_count(home) == runs
    assert "Summary" in out  # the summary is still printed

    # In a fresh interpreter, as a user runs it, the command loads neither Dagster nor Ray.
    probe = (
        "import sys\n"
        "from prx_data.app.cli import main\n"
        f"code = main(['run', '--root', {str(root)!r}])\n"
        "print('HEAVY', sorted(m for m in ('dagster', 'ray', 'torch', 'streaming') if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "[photos] inputs unchanged" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "HEAVY []" in proc.stdout, proc.stdout

    # A new mtime on the same bytes is a change: the source and the corpus run again.
    image = root / "photos" / "p0.jpg"
    st = image.stat()
    os.utime(image, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    code, out = _run(root)
    assert code == 0, out
    assert "[photos] materializing" in out and "[corpus] materializing" in out
    assert _run_count(home) > runs

    # --force runs an unchanged source.
    runs = _run_count(home)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", "--root", str(root), "--force"]) == 0
    get_settings.cache_clear()
    assert "[photos] materializing" in printed.getvalue()
    assert _run_count(home) > runs


def test_a_misspelt_source_runs_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    """``run --source phots`` used to run no source, skip the corpus and exit 0."""
    root = tiny_root(tmp_path / "data")
    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code = main(["run", "--root", str(root), "--source", "phots", "--source", "photos"])
    get_settings.cache_clear()
    err = capsys.readouterr().err
    assert code == 2
    assert "no source named 'phots'" in err and "(sources: photos)" in err, err
    assert _run_count(home) == 0
    assert not list(Path(root).rglob("*.lance")), "nothing was ingested"


def test_an_opt_out_key_of_an_unregistered_source_is_filed_with_a_warning(tmp_path, monkeypatch, capsys):
    """A misspelt source in ``optout add --key`` matches nothing: the request is kept (the source
    may come later) and the command says so at once."""
    root = tiny_root(tmp_path / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert main(["optout", "add", "--root", str(root), "--id", "req-1", "--key", "phots:p0.jpg", "--key", "photos:p1.jpg"]) == 0
    err = capsys.readouterr().err
    assert "no source named 'phots' is registered (sources: photos)" in err, err
    assert (Path(root) / "optout" / "req-1.yaml").exists()
    assert main(["optout", "add", "--root", str(root), "--id", "req-2", "--key", "photos:p0.jpg"]) == 0
    assert "warning" not in capsys.readouterr().err
    get_settings.cache_clear()


def test_a_misspelt_root_is_an_error_not_a_new_empty_root(tmp_path, monkeypatch, capsys):
    """``run --root`` of a folder that does not exist used to create it (a Dagster home, empty
    tables) and report a successful run of nothing; every command taking --root but ``demo``
    now refuses it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    typo = tmp_path / "dat"
    for argv in (["run"], ["sources"], ["lineage", "--key", "photos:p0.jpg"], ["optout", "apply"]):
        assert main([*argv, "--root", str(typo)]) == 2, argv
        assert f"data root {typo} does not exist" in capsys.readouterr().err
    assert not typo.exists()
    get_settings.cache_clear()
