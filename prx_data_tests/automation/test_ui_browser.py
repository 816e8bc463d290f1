"""`prx-data ui` in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright):
after `prx-data run`, the command opens the Dagster UI on that data with no argument, the CLI's
runs are on the Overview timeline, every check is green, the Lineage link opens every group, the
asset graph shows, one source's chain launched by clicking runs to success, and Ctrl-C stops it
all. With the daemon on: a bad spec shows on its check, a configuration error fails once with its
message first, and a removed source retires.

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
from prx_data.app.local_ray import free_port, listening
from prx_data.core.settings import get_settings
from prx_data.demo.corpus import build_demo_corpus

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
    env["PRX_SENSOR_INTERVAL_S"] = "5"  # the daemon reacts within seconds, not half a minute
    log = open(tmp_path / "ui.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "prx_data.app.cli", "ui", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
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


def _graphql(url: str, query: str) -> dict:
    """A query to the running webserver (loopback), as the UI's own pages send them."""
    import json
    import urllib.request

    request = urllib.request.Request(
        url + "/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


# The fields the Overview timeline reads (RunTimelineFragment): it drops a run whose
# repositoryOrigin is null and groups the others by location, repository and job.
TIMELINE_RUNS = "{ runsOrError { ... on Runs { results { runId pipelineName tags { key value } repositoryOrigin { repositoryName repositoryLocationName } } } } }"
CHECKS = (
    "{ assetNodes { assetKey { path } assetChecksOrError { ... on AssetChecks { checks { name "
    "executionForLatestMaterialization { status evaluation { severity } } } } } } }"
)


def check_counts(url: str) -> dict[str, int]:
    """Every asset check's latest outcome: passed / failed / warn (failed at WARN severity) / other."""
    counts = {"passed": 0, "failed": 0, "warn": 0, "other": 0}
    for node in _graphql(url, CHECKS)["assetNodes"]:
        for check in (node["assetChecksOrError"] or {}).get("checks", []):
            execution = check["executionForLatestMaterialization"]
            status = execution["status"] if execution else "NONE"
            if status == "SUCCEEDED":
                counts["passed"] += 1
            elif status == "FAILED":
                counts["warn" if (execution["evaluation"] or {}).get("severity") == "WARN" else "failed"] += 1
            else:
                counts["other"] += 1
    return counts


def test_ui_opens_runs_a_chain_shows_a_bad_spec_retires_a_source_and_stops_on_ctrl_c(ui, data_root):
    """One UI for the whole session a user would have: the last run's data and a chain launched by
    a click; then, with the daemon on, a bad spec and a removed source; then Ctrl-C. (One
    `prx-data run` and one UI start: two took ~60 s more of the suite.)"""
    url, process, log = ui
    _opens_on_the_last_run_and_runs_a_chain_from_a_click(url, log, data_root)
    _a_bad_spec_shows_on_the_check_and_a_removed_source_retires(url, data_root)

    # Ctrl-C in the terminal: the command stops the UI's process group and its Ray, and exits.
    port = int(url.rsplit(":", 1)[1])
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=90) == 0, log.read_text()[-3000:]
    assert not listening(port)


def _opens_on_the_last_run_and_runs_a_chain_from_a_click(url: str, log: Path, data_root: Path) -> None:
    text = log.read_text()
    assert f"Dagster UI on {data_root}" in text and str(data_root) in text  # the last run's data
    # One timeline: the runs `prx-data run` made are runs of the code location's jobs.
    cli_runs = [
        r for r in _graphql(url, TIMELINE_RUNS)["runsOrError"]["results"] if {"key": "prx/launched_by", "value": "cli"} in r["tags"]
    ]
    assert sorted(r["pipelineName"] for r in cli_runs) == ["corpus", "source_pipeline"]
    assert all(r["repositoryOrigin"] == {"repositoryName": "__repository__", "repositoryLocationName": "prx_data"} for r in cli_runs), (
        cli_runs
    )
    # Healthy demo data: every check that ran passed.
    counts = check_counts(url)
    assert counts["passed"] >= 5 and counts["failed"] == counts["warn"] == 0, counts
    found = re.search(r"lineage, every group open: (\S+)", text)
    assert found, text
    lineage = found.group(1)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(url + "/overview/activity/timeline")
        page.get_by_text("corpus", exact=True).first.wait_for()  # only the CLI ran the corpus job
        page.goto(lineage)  # asset nodes drawn, not collapsed group boxes
        for asset in ("raw_samples", "caption_labels", "mds_shards", "corpus_report"):
            page.get_by_text(asset, exact=True).first.wait_for()
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


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


def _a_bad_spec_shows_on_the_check_and_a_removed_source_retires(url: str, data_root: Path) -> None:
    """In the running UI (daemon on): a bad spec turns source_registry's check red with the file
    named on the page; deleting the good spec retires the source (its partition leaves)."""
    import dagster as dg

    from prx_data.defs.partitions import SOURCES_PARTITION

    (data_root / "sources" / "typo.yaml").write_text("name: typo\nshape: image_foldr\nlocation: x\n")
    # A valid spec pointing at a table that is not there: a configuration error, failed once.
    (data_root / "sources" / "ghost.yaml").write_text(
        f"name: ghost\nshape: lance\nlocation: {data_root / 'nowhere.lance'}\nlicense: cc0\nfields: {{key: id, image: image, caption: text}}\n"
    )
    key = dg.AssetCheckKey(dg.AssetKey("source_registry"), "specs_and_requests_valid")
    with dg.DagsterInstance.get() as instance:
        _wait_for(
            lambda: (
                (r := instance.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key)) and r.status.value == "FAILED"
            ),
            180,
            "the registry check to fail",
        )
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(url + "/assets/source_registry?view=checks")
        page.get_by_text("specs_and_requests_valid").first.wait_for()
        page.get_by_text("typo.yaml").first.wait_for()  # the bad file is named on the page

        with dg.DagsterInstance.get() as instance:
            ghost = _wait_for(
                lambda: [
                    r
                    for r in instance.get_runs(dg.RunsFilter(tags={"dagster/partition": "ghost"}))
                    if r.status == dg.DagsterRunStatus.FAILURE
                ],
                300,
                "the ghost source's run to fail",
            )[0]
            failures = [
                e
                for e in instance.all_logs(ghost.run_id)
                if e.dagster_event and e.dagster_event.event_type_value in ("STEP_FAILURE", "STEP_UP_FOR_RETRY")
            ]
        events = [e.dagster_event for e in failures if e.dagster_event is not None]
        assert [e.event_type_value for e in events] == ["STEP_FAILURE"]  # one attempt
        error = events[0].step_failure_data.error
        assert error is not None
        assert "nowhere.lance" in error.message.splitlines()[0] and "not found" in error.message and ".rs:" not in error.message
        assert error.cause is None  # "View full message" opens on the message, no chained stack
        page.goto(f"{url}/runs/{ghost.run_id}")
        page.get_by_text("nowhere.lance").first.wait_for()
        assert ".rs:" not in page.inner_text("body")
        browser.close()

    (data_root / "sources" / f"{SOURCE}.yaml").unlink()
    with dg.DagsterInstance.get() as instance:
        _wait_for(lambda: SOURCE not in instance.get_dynamic_partitions(SOURCES_PARTITION), 300, "the partition to be retired")
        # The op deletes the partition as its last act; the run's end is recorded just after.
        (run,) = _wait_for(
            lambda: [r for r in instance.get_runs(dg.RunsFilter(job_name="retire_source")) if r.is_finished], 60, "the retire run to end"
        )
        assert run.status == dg.DagsterRunStatus.SUCCESS
        # No run retry re-launched the configuration error meanwhile (dagster.yaml allows 2).
        assert not instance.get_runs(dg.RunsFilter(tags={"dagster/parent_run_id": ghost.run_id}))
    assert list((data_root / "mds" / "_retired" / SOURCE).glob("*/receipt.json"))
