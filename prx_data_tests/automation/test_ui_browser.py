"""`prx-data ui` in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright):
after `prx-data run`, the command opens the Dagster UI on that data with no argument, the asset
graph shows, one source's chain launched by clicking runs to success, and Ctrl-C stops it all.

Skipped only when the browser or Playwright is not installed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prx_data.app.cli import main
from prx_data.demo.corpus import build_demo_corpus
from prx_data.app.local_ray import free_port, listening
from prx_data.core.settings import get_settings

CHROMIUM = os.environ.get("PRX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
REPO = Path(__file__).resolve().parents[2]
SOURCE = "archive"

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture
def ui(data_root, tmp_path, monkeypatch):
    """`prx-data run` on one demo source, then `prx-data ui` (no --root: the last run's data) in
    its own process group, as a terminal would start it."""
    build_demo_corpus(data_root)
    for spec in (data_root / "sources").glob("*.yaml"):
        if spec.stem != SOURCE:
            spec.unlink()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["run", "--root", str(data_root)]) == 0, out.getvalue()
    get_settings.cache_clear()

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PRX_DATA_ROOT", "DAGSTER_HOME")}
    env["PYTHONPATH"] = str(REPO)
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    log = open(tmp_path / "ui.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "prx_data.app.cli", "ui", "--port", str(port)], cwd=tmp_path, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and "open http://" not in (tmp_path / "ui.log").read_text():
        time.sleep(1)
    assert process.poll() is None, (tmp_path / "ui.log").read_text()[-3000:]
    try:
        yield f"http://127.0.0.1:{port}", process, tmp_path / "ui.log"
    finally:
        if process.poll() is None:
            # Ctrl-C first: the command stops dagster dev's own process group, which a kill of
            # this group alone would orphan.
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _run_launched_from_the_ui(partition: str, timeout_s: float = 120) -> str:
    """The id of the run the click created (the launch toast comes and goes too fast to rely on)."""
    import dagster as dg

    deadline = time.monotonic() + timeout_s
    with dg.DagsterInstance.get() as instance:
        while time.monotonic() < deadline:
            runs = instance.get_runs(dg.RunsFilter(tags={"dagster/from_ui": "true", "dagster/partition": partition}), limit=1)
            if runs:
                return runs[0].run_id
            time.sleep(1)
    raise AssertionError("no run was launched from the UI")


def test_ui_opens_on_the_last_run_and_runs_a_chain_from_a_click(ui, data_root):
    url, process, log = ui
    text = log.read_text()
    assert f"Dagster UI on {data_root}" in text and str(data_root) in text  # the last run's data
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(url + "/locations/prx_data/jobs/source_pipeline")
        page.get_by_role("button", name="Materialize all…").wait_for()
        # The asset graph of the chain, drawn by group (collapsed), with its five assets.
        page.get_by_text("View 5 assets").wait_for()
        for group in ("ingest", "image", "caption"):
            page.get_by_text(group, exact=True).first.wait_for()
        page.wait_for_timeout(1000)
        if page.get_by_role("button", name="Skip").count():  # Dagster's first-visit newsletter dialog
            page.get_by_role("button", name="Skip").click()
        page.get_by_role("button", name="Materialize all…").click()
        page.get_by_text("Select a partition or create one").click()
        page.keyboard.type(SOURCE)
        page.get_by_role("menuitem").filter(has_text=SOURCE).first.click()
        page.keyboard.press("Escape")
        page.get_by_role("button", name="Launch 1 run").click()
        run_id = _run_launched_from_the_ui(SOURCE)
        page.goto(f"{url}/runs/{run_id}")
        # The run page follows the run live; the status tag turns to Success (or Failure).
        outcome = page.get_by_text(re.compile(r"^(Success|Failure)$")).first
        outcome.wait_for(timeout=600_000)
        assert outcome.inner_text() == "Success", log.read_text()[-3000:]
        browser.close()

    # Ctrl-C in the terminal: the command stops the UI's process group and its Ray, and exits.
    port = int(url.rsplit(":", 1)[1])
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=90) == 0, log.read_text()[-3000:]
    assert not listening(port)


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_bad_spec_shows_on_the_check_and_a_removed_source_retires(ui, data_root):
    """In the running UI (daemon on): a bad spec turns source_registry's check red with the file
    named on the page; deleting the good spec retires the source (its partition leaves)."""
    import dagster as dg

    from prx_data.defs.partitions import sources_partitions

    url, process, log = ui
    (data_root / "sources" / "typo.yaml").write_text("name: typo\nshape: image_foldr\nlocation: x\n")
    key = dg.AssetCheckKey(dg.AssetKey("source_registry"), "specs_and_requests_valid")
    with dg.DagsterInstance.get() as instance:
        _wait_for(lambda: (r := instance.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key))
                  and r.status.value == "FAILED", 180, "the registry check to fail")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(url + "/assets/source_registry?view=checks")
        page.get_by_text("specs_and_requests_valid").first.wait_for()
        page.get_by_text("typo.yaml").first.wait_for()  # the bad file is named on the page
        browser.close()

    (data_root / "sources" / f"{SOURCE}.yaml").unlink()
    with dg.DagsterInstance.get() as instance:
        _wait_for(lambda: SOURCE not in instance.get_dynamic_partitions(sources_partitions.name), 300, "the partition to be retired")
        (run,) = instance.get_runs(dg.RunsFilter(job_name="retire_source"))
        assert run.status == dg.DagsterRunStatus.SUCCESS
    assert list((data_root / "mds" / "_retired" / SOURCE).glob("*/receipt.json"))
